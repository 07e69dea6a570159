// Command tq inspects a queue: its partitions, the rows of one, the cells
// of a row, a partition's production and consumption (status), and clears
// a partition, resets a task's consumption or retries and drops its dead
// rows. It opens the same URLs as tq.Open
// (memory://, redis://…, rediss://…, redis+cluster://…, yuanrong://).
//
// Usage:
//
//	tq [-url URL] [-json] <command> [flags] [args]
//
// The URL comes from -url, else from the environment variable TQ_URL.
// Output is an aligned table, or with -json one JSON document per command.
// Exit status: 0 on success, 1 when the command failed (the queue could
// not be opened, no such partition, key or field), 2 for a usage error
// (clear, reset or drop without -yes included).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"text/tabwriter"

	goredis "github.com/redis/go-redis/v9"

	_ "github.com/tqgo/tqgo/backends/redis" // redis://, rediss://, redis+cluster://
	"github.com/tqgo/tqgo/tq"
	_ "github.com/tqgo/tqgo/yuanrong" // yuanrong://
)

// urlEnv names the environment variable that gives the URL when -url is
// not set.
const urlEnv = "TQ_URL"

// quietLogger drops go-redis's log lines (a pool's every failed dial): the
// command's error already says what failed.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func main() {
	goredis.SetLogger(quietLogger{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// A command is one subcommand: run parses its own flags from args (with
// s.flags(cmd)) and writes its result through s.
type command struct {
	name    string
	args    string // the usage line's arguments
	summary string
	run     func(ctx context.Context, s *session, cmd command, args []string) error
}

// commands is the subcommand table, in the order usage lists them.
var commands = []command{
	{"partitions", "", "list the partitions that have rows", runPartitions},
	{"rows", "<partition>", "list a partition's rows: index, key, fields, tags", runRows},
	{"dump", "[-n N] <partition> <key> [field...]", "print a row's cells (every field when none is named)", runDump},
	{"clear", "-yes <partition>", "remove every row of a partition (ClearPartition)", runClear},
	{"status", "[-task T -fields f1,f2] <partition>", "production per field and consumption per task (ready, waiting, leased, acked, dead, dropped)", runStatus},
	{"reset", "-yes <partition> <task> [key...]", "forget a task's consumption of rows (every row when none is named): ready again", runReset},
	{"dead", "[-fields f1,f2] <partition> <task>", "list the rows a task gave up on (delivered its MaxDeliveries times)", runDead},
	{"retry", "[-fields f1,f2] <partition> <task> <key...>", "make dead rows of a task ready again", runMark},
	{"drop", "-yes [-fields f1,f2] <partition> <task> <key...>", "consume ready or dead rows of a task without delivery", runMark},
}

func lookupCommand(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// usageError is a mistake in the command line: exit status 2. An empty
// msg has been reported already (by the flag package).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// errHelp is -h or -help: usage printed, exit status 0.
var errHelp = flag.ErrHelp

// session is what a command runs with: the global flags, the output, and
// the client, opened on first use.
type session struct {
	url    string
	json   bool
	stdout io.Writer
	stderr io.Writer
	client *tq.Client
}

// open opens the queue at s.url once.
func (s *session) open(ctx context.Context) (*tq.Client, error) {
	if s.client != nil {
		return s.client, nil
	}
	if s.url == "" {
		return nil, usagef("no queue URL: set -url or %s", urlEnv)
	}
	c, err := tq.Open(ctx, s.url)
	if err != nil {
		return nil, err
	}
	s.client = c
	return c, nil
}

// flags is a flag set for command name whose usage goes to s.stderr.
func (s *session) flags(cmd command) *flag.FlagSet {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	fs.SetOutput(s.stderr)
	fs.Usage = func() {
		fmt.Fprintf(s.stderr, "usage: tq %s %s\n\n%s\n", cmd.name, cmd.args, cmd.summary)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args into fs and checks the count of positional arguments
// is within [min, max] (max < 0: no limit).
func parse(fs *flag.FlagSet, args []string, min, max int) ([]string, error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, errHelp
		}
		return nil, &usageError{} // the flag package printed the error and usage
	}
	rest := fs.Args()
	if len(rest) < min || max >= 0 && len(rest) > max {
		fs.Usage()
		return nil, usagef("wrong number of arguments")
	}
	return rest, nil
}

// emitJSON writes v as one indented JSON document.
func (s *session) emitJSON(v any) error {
	enc := json.NewEncoder(s.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table returns an aligned writer over s.stdout; the caller flushes it.
func (s *session) table() *tabwriter.Writer {
	return tabwriter.NewWriter(s.stdout, 0, 4, 2, ' ', 0)
}

// run is the whole tool: it parses args (without the program name), runs
// the command and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	s := &session{stdout: stdout, stderr: stderr}
	fs := flag.NewFlagSet("tq", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&s.url, "url", os.Getenv(urlEnv), "queue URL, as tq.Open takes it (default $"+urlEnv+")")
	fs.BoolVar(&s.json, "json", false, "print one JSON document instead of a table")
	fs.Usage = func() { usage(stderr, fs) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() == 0 {
		usage(stderr, fs)
		return 2
	}
	name := fs.Arg(0)
	if name == "help" {
		usage(stdout, fs)
		return 0
	}
	cmd, ok := lookupCommand(name)
	if !ok {
		fmt.Fprintf(stderr, "tq: unknown command %q (run 'tq help' for the list)\n", name)
		return 2
	}
	err := cmd.run(ctx, s, cmd, fs.Args()[1:])
	if s.client != nil {
		if cerr := s.client.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errHelp):
		return 0
	case errors.As(err, &ue):
		if ue.msg != "" {
			fmt.Fprintf(stderr, "tq %s: %v\n", name, err)
		}
		return 2
	default:
		fmt.Fprintf(stderr, "tq %s: %v\n", name, err)
		return 1
	}
}

func usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "usage: tq [-url URL] [-json] <command> [flags] [args]")
	fmt.Fprintln(w, "\ncommands:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s %s\t%s\n", c.name, c.args, c.summary)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nflags:")
	out := fs.Output()
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(out)
}

// openPartition opens the queue and returns an error unless partition has
// rows: List of an unknown partition is empty, which would read as a
// partition of no rows.
func (s *session) openPartition(ctx context.Context, partition string) (*tq.Client, error) {
	c, err := s.open(ctx)
	if err != nil {
		return nil, err
	}
	ps, err := c.Partitions(ctx)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(ps, partition) {
		return nil, fmt.Errorf("no partition %q", partition)
	}
	return c, nil
}

func runPartitions(ctx context.Context, s *session, cmd command, args []string) error {
	if _, err := parse(s.flags(cmd), args, 0, 0); err != nil {
		return err
	}
	c, err := s.open(ctx)
	if err != nil {
		return err
	}
	ps, err := c.Partitions(ctx)
	if err != nil {
		return err
	}
	if s.json {
		return s.emitJSON(struct {
			Partitions []string `json:"partitions"`
		}{append([]string{}, ps...)})
	}
	for _, p := range ps {
		fmt.Fprintln(s.stdout, p)
	}
	return nil
}

// fieldJSON is a field of a row as -json prints it.
type fieldJSON struct {
	Kind  string `json:"kind"` // "tensor" or "value"
	DType string `json:"dtype,omitempty"`
	Shape []int  `json:"shape,omitzero"` // [] for a 0-d tensor, absent for a value
}

type rowJSON struct {
	Index  uint64               `json:"index"`
	Key    string               `json:"key"`
	Fields map[string]fieldJSON `json:"fields"`
	Tag    map[string]any       `json:"tag"`
}

func fieldOf(fi tq.FieldInfo) fieldJSON {
	if fi.DType == "" {
		return fieldJSON{Kind: "value"}
	}
	return fieldJSON{Kind: "tensor", DType: fi.DType, Shape: append([]int{}, fi.Shape...)}
}

func runRows(ctx context.Context, s *session, cmd command, args []string) error {
	rest, err := parse(s.flags(cmd), args, 1, 1)
	if err != nil {
		return err
	}
	partition := rest[0]
	c, err := s.openPartition(ctx, partition)
	if err != nil {
		return err
	}
	m, err := c.List(ctx, partition)
	if err != nil {
		return err
	}
	if s.json {
		rows := make([]rowJSON, len(m.Rows))
		for i, r := range m.Rows {
			rows[i] = rowJSON{Index: r.Index, Key: r.Key, Fields: map[string]fieldJSON{}, Tag: jsonSafeMap(r.Tag)}
			for f, fi := range r.Fields {
				rows[i].Fields[f] = fieldOf(fi)
			}
		}
		return s.emitJSON(struct {
			Partition string    `json:"partition"`
			Rows      []rowJSON `json:"rows"`
		}{partition, rows})
	}
	tw := s.table()
	fmt.Fprintln(tw, "INDEX\tKEY\tFIELDS\tTAG")
	for _, r := range m.Rows {
		fields := make([]string, 0, len(r.Fields))
		for _, f := range sortedKeys(r.Fields) {
			fields = append(fields, f+"="+fieldText(r.Fields[f]))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", r.Index, strconvQuote(r.Key), strings.Join(fields, " "), formatValue(map[string]any(r.Tag)))
	}
	return tw.Flush()
}

// fieldText is a field as the rows table shows it: "float32[2 3]", or
// "value" for a general value.
func fieldText(fi tq.FieldInfo) string {
	if fi.DType == "" {
		return "value"
	}
	return fi.DType + shapeText(fi.Shape)
}

type cellJSON struct {
	Kind     string `json:"kind"` // "tensor" or "value"
	DType    string `json:"dtype,omitempty"`
	Shape    []int  `json:"shape,omitzero"`     // [] for a 0-d tensor, absent for a value
	Elements *int   `json:"elements,omitempty"` // a tensor's element count
	Head     []any  `json:"head,omitempty"`     // a tensor's first -n elements
	Value    any    `json:"value,omitempty"`    // a value cell's value, absent when nil
}

func runDump(ctx context.Context, s *session, cmd command, args []string) error {
	fs := s.flags(cmd)
	n := fs.Int("n", 8, "how many of a tensor's first elements to print")
	rest, err := parse(fs, args, 2, -1)
	if err != nil {
		return err
	}
	if *n < 0 {
		return usagef("-n %d is negative", *n)
	}
	partition, key, fields := rest[0], rest[1], rest[2:]
	c, err := s.openPartition(ctx, partition)
	if err != nil {
		return err
	}
	m, err := c.Lookup(ctx, partition, []string{key})
	if errors.Is(err, tq.ErrNotFound) {
		return fmt.Errorf("no key %q in partition %q", key, partition)
	}
	if err != nil {
		return err
	}
	row := m.Rows[0]
	if len(fields) == 0 {
		fields = sortedKeys(row.Fields)
	}
	for _, f := range fields {
		if _, ok := row.Fields[f]; !ok {
			return fmt.Errorf("no field %q in key %q of partition %q (it has: %s)", f, key, partition, strings.Join(sortedKeys(row.Fields), ", "))
		}
	}
	b, err := c.BatchGet(ctx, partition, []string{key}, fields...)
	if err != nil {
		return err
	}
	cells := make([]cellJSON, len(fields))
	for i, f := range fields {
		cells[i] = cellOf(b[f].Row(0), *n)
	}
	if s.json {
		out := map[string]cellJSON{}
		for i, f := range fields {
			out[f] = cells[i]
		}
		return s.emitJSON(struct {
			Partition string              `json:"partition"`
			Key       string              `json:"key"`
			Index     uint64              `json:"index"`
			Fields    map[string]cellJSON `json:"fields"`
		}{partition, key, row.Index, out})
	}
	fmt.Fprintf(s.stdout, "partition %s key %s index %d\n", strconvQuote(partition), strconvQuote(key), row.Index)
	tw := s.table()
	fmt.Fprintln(tw, "FIELD\tDTYPE\tSHAPE\tVALUES")
	for i, f := range fields {
		fmt.Fprintf(tw, "%s\t%s\n", f, cellText(cells[i]))
	}
	return tw.Flush()
}

func runClear(ctx context.Context, s *session, cmd command, args []string) error {
	fs := s.flags(cmd)
	yes := fs.Bool("yes", false, "really remove the rows (required)")
	rest, err := parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	partition := rest[0]
	if !*yes {
		return usagef("refusing to remove every row of partition %q without -yes", partition)
	}
	c, err := s.openPartition(ctx, partition)
	if err != nil {
		return err
	}
	m, err := c.List(ctx, partition)
	if err != nil {
		return err
	}
	if err := c.ClearPartition(ctx, partition); err != nil {
		return err
	}
	if s.json {
		return s.emitJSON(struct {
			Partition string `json:"partition"`
			Cleared   int    `json:"cleared"`
		}{partition, len(m.Rows)})
	}
	fmt.Fprintf(s.stdout, "cleared partition %s (%d rows)\n", strconvQuote(partition), len(m.Rows))
	return nil
}
