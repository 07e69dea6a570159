// Command tq inspects a queue: its partitions, the rows of one (with
// -task, that task's state and deliveries of each), the cells of a row, a
// partition's production and consumption (status), a task's running
// leases with their holders and rows (leases), a live view of
// consumption with rates (top), and clears
// a partition, sets its capacity, resets a task's consumption or retries
// and drops its dead rows. It opens the same URLs as tq.Open
// (memory://, file:///dir, redis://…, rediss://…, redis+cluster://…,
// tq://host:port, yuanrong://). tq serve serves an engine to tq:// clients.
//
// A file:///dir another process holds is shown read-only: partitions,
// rows, dump, status, dead and capacity (printing it) run on a read-only
// view of the directory (as with file:///dir?mode=ro), saying on stderr
// who holds it and how fresh the view is (the time of the last record it
// read, its log position); the commands that write fail, naming the
// holder's PID and host.
//
// Usage:
//
//	tq [-url URL] [-json] [-timeout D] <command> [flags] [args]
//
// Flags, the global ones too, may come before, after or among a command's
// arguments ("tq status grpo/samples -task train -fields rewards"); "--"
// ends them, for a key that starts with "-". The URL comes from -url, else
// from the environment variable TQ_URL. -timeout (default 30s, 0 for
// none; a negative one is a usage error) bounds the whole command, opening
// the queue included (top's, each frame: top runs until interrupted, or
// for -n frames). A -fields flag, given, names at least one field
// (an empty -fields is a usage error). Output is
// an aligned table, or with -json one JSON document per command.
//
// Exit status: 0 on success, 1 when the command failed (the queue could
// not be opened; no such partition, task, key or field, the error naming
// those there are; the command timed out), 2 for a usage error (clear,
// reset or drop without -yes included; a flag's bad value). A task exists
// once it has state in the partition: status lists it. A partition exists
// once it has rows; status and capacity also know one that has only a
// capacity, set before its first put.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends/file"    // file:///dir: the durable embedded engine (a read-only view of a directory another process holds)
	_ "github.com/tqgo/tqgo/backends/redis" // redis://, rediss://, redis+cluster://
	"github.com/tqgo/tqgo/tq"
	_ "github.com/tqgo/tqgo/tqserve"  // tq://host:port: a tq server
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

// A command is one subcommand. define adds its flags to a flag set (which
// also holds the global ones) and returns its action, which reads them
// once the set has parsed the command line; run makes the context (its
// -timeout) only then.
type command struct {
	name     string
	args     string // the usage line's arguments
	summary  string
	min, max int // how many positional arguments (max < 0: no limit)
	define   func(fs *flag.FlagSet) action
}

// An action runs a command on its positional arguments, writing its
// result through s.
type action func(ctx context.Context, s *session, args []string) error

// noFlags is define for a command without flags of its own.
func noFlags(a action) func(*flag.FlagSet) action {
	return func(*flag.FlagSet) action { return a }
}

// commands is the subcommand table, in the order usage lists them.
var commands = []command{
	{"partitions", "", "list the partitions that have rows", 0, 0, noFlags(runPartitions)},
	{"rows", "[-task T [-fields f1,f2]] <partition>", "list a partition's rows: index, key, fields, tags; with -task, the task's state and deliveries of each", 1, 1, defineRows},
	{"dump", "[-n N] <partition> <key> [field...]", "print a row's cells (every field when none is named)", 2, -1, defineDump},
	{"clear", "-yes [-fields f1,f2] <partition>", "remove every row of a partition (ClearPartition), or with -fields those fields of every row (ClearFields)", 1, 1, defineClear},
	{"status", "[-task T -fields f1,f2] <partition>", "production per field and consumption per task (ready, waiting, leased, acked, dead, dropped)", 1, 1, defineStatus},
	{"capacity", "[-rows N] [-bytes SIZE] [-clear-acked t1,t2] [-off] <partition>", "set a partition's capacity (the parts not given are kept; -off lifts it), or with no flags print it and what the partition holds", 1, 1, defineCapacity},
	{"reset", "-yes <partition> <task> [key...]", "forget a task's consumption of rows (every row when none is named): ready again", 2, -1, defineReset},
	{"dead", "[-fields f1,f2] <partition> <task>", "list the rows a task gave up on (delivered its MaxDeliveries times)", 2, 2, defineDead},
	{"retry", "[-fields f1,f2] <partition> <task> <key...>", "make dead rows of a task ready again", 3, -1, defineMark("retry")},
	{"drop", "-yes [-new-task] [-fields f1,f2] <partition> <task> <key...>", "consume ready or dead rows of a task without delivery", 3, -1, defineMark("drop")},
	{"leases", "<partition> <task>", "list a task's running leases: holder, rows and their keys, deliveries, until when", 2, 2, defineLeases},
	{"serve", "-engine URL [-listen ADDR] [-token T] [-tls-cert F -tls-key F] [-cells-url URL] [-metrics ADDR]", "serve an engine's partitions to tq:// clients over gRPC (one process runs their rules for every client) until SIGTERM", 0, 0, defineServe},
	{"top", "[-n N | -once] [-interval D] [partition...]", "a live view of partitions' consumption (every partition's when none is named): per task its rows by state, claims and acks per second, lag, leases and their holders; refreshed in place on a terminal", 0, -1, defineTop},
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

// defaultTimeout bounds a whole command unless -timeout says otherwise.
const defaultTimeout = 30 * time.Second

// session is what a command runs with: the global flags, the output, and
// the client, opened on first use.
type session struct {
	url     string // -url, else $TQ_URL
	json    bool
	timeout time.Duration // 0: none
	stdout  io.Writer
	stderr  io.Writer
	client  *tq.Client
	// perFrame: -timeout bounds each of the command's steps, not the
	// whole command (see perFrame).
	perFrame bool
	// view: the command only reads, and may run on a read-only view of a
	// file:// directory another process holds (see readsOnly).
	view        bool
	closeEngine func() error // closes the engine of a read-only view, after client
}

// globalFlags adds -url, -json and -timeout to fs, defaulting to their
// values so far: the global flag set has them, and so has every command's,
// so that they may come after the command name too.
func (s *session) globalFlags(fs *flag.FlagSet) {
	// A flag without a default: usage would print the URL, password and all.
	fs.Func("url", "queue `URL`, as tq.Open takes it (default $"+urlEnv+")", func(v string) error {
		s.url = v
		return nil
	})
	fs.BoolVar(&s.json, "json", s.json, "print one JSON document instead of a table")
	fs.Var(timeoutValue{&s.timeout}, "timeout", "give up on the command after this long (0: never)")
}

// timeoutValue is the -timeout flag: a duration, not negative.
type timeoutValue struct{ d *time.Duration }

func (v timeoutValue) String() string {
	if v.d == nil {
		return ""
	}
	return v.d.String()
}

func (v timeoutValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("want a duration (30s, 2m; 0: never)")
	}
	if d < 0 {
		return fmt.Errorf("%v is negative (0: never)", d)
	}
	*v.d = d
	return nil
}

// open opens the queue at s.url once.
func (s *session) open(ctx context.Context) (*tq.Client, error) {
	if s.client != nil {
		return s.client, nil
	}
	if s.url == "" {
		return nil, usagef("no queue URL: set -url or %s", urlEnv)
	}
	if readOnlyURL(s.url) {
		return s.openView(ctx, s.url, nil)
	}
	c, err := tq.Open(ctx, s.url)
	if err != nil && s.view && errors.Is(err, file.ErrLocked) {
		return s.openView(ctx, withReadOnly(s.url), err)
	}
	if err != nil {
		return nil, err
	}
	s.client = c
	return c, nil
}

// flags is a flag set for cmd, with the global flags, whose usage goes to
// s.stderr.
func (s *session) flags(cmd command) *flag.FlagSet {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	fs.SetOutput(s.stderr)
	fs.Usage = func() {
		fmt.Fprintf(s.stderr, "usage: tq %s %s\n\n%s\n(flags may also follow the arguments; -- ends them)\n\n", cmd.name, cmd.args, cmd.summary)
		fs.PrintDefaults()
	}
	s.globalFlags(fs)
	return fs
}

// parse parses args into fs, flags anywhere among them, and checks the
// count of positional arguments is within [min, max] (max < 0: no limit).
func parse(fs *flag.FlagSet, args []string, min, max int) ([]string, error) {
	rest, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, errHelp
		}
		return nil, &usageError{} // the flag package printed the error and usage
	}
	if len(rest) < min || max >= 0 && len(rest) > max {
		fs.Usage()
		return nil, usagef("wrong number of arguments: %d, want %s", len(rest), countText(min, max))
	}
	return rest, nil
}

func countText(min, max int) string {
	switch {
	case max < 0:
		return fmt.Sprintf("at least %d", min)
	case min == max:
		return fmt.Sprint(min)
	}
	return fmt.Sprintf("%d to %d", min, max)
}

// parseInterleaved parses args into fs with flags before, after and among
// the positional arguments, which it returns in order: the flag package
// stops at the first of those, so it parses again after each. "--" ends
// the flags: every argument after it is positional (a key "-k", say).
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if endedFlags(fs, args, len(args)-len(rest)) {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// endedFlags reports whether fs.Parse, having used the first n of args,
// stopped at a "--" (which it drops) rather than at a positional
// argument: the last it used is "--", and not as a flag's value
// ("-task --").
func endedFlags(fs *flag.FlagSet, args []string, n int) bool {
	if n == 0 || args[n-1] != "--" {
		return false
	}
	return n < 2 || !takesValue(fs, args[n-2])
}

// takesValue reports whether arg is a flag of fs that takes the next
// argument as its value: -name or --name, without "=", not a bool flag.
func takesValue(fs *flag.FlagSet, arg string) bool {
	if len(arg) < 2 || arg[0] != '-' || strings.Contains(arg, "=") {
		return false
	}
	f := fs.Lookup(strings.TrimPrefix(arg[1:], "-"))
	if f == nil {
		return false
	}
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return !ok || !b.IsBoolFlag()
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
	s := &session{stdout: stdout, stderr: stderr, timeout: defaultTimeout}
	fs := flag.NewFlagSet("tq", flag.ContinueOnError)
	fs.SetOutput(stderr)
	s.globalFlags(fs)
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
	cfs := s.flags(cmd)
	act := cmd.define(cfs)
	rest, err := parse(cfs, fs.Args()[1:], cmd.min, cmd.max)
	s.view = err == nil && readsOnly(cmd, cfs)
	if err == nil {
		if s.url == "" {
			s.url = os.Getenv(urlEnv)
		}
		s.perFrame = perFrame[name]
		err = s.runAction(ctx, act, rest)
	}
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errHelp):
		return 0
	case errors.As(err, &ue):
		if ue.msg != "" {
			fmt.Fprintf(stderr, "tq %s: %s\n", name, s.redact(err.Error()))
		}
		return 2
	default:
		fmt.Fprintf(stderr, "tq %s: %s\n", name, s.redact(err.Error()))
		return 1
	}
}

// runAction runs act within s.timeout, closes the client it opened, and
// says when the command ran out of time or was interrupted.
func (s *session) runAction(ctx context.Context, act action, args []string) error {
	cctx, cancel := ctx, context.CancelFunc(func() {})
	if s.timeout > 0 && !s.perFrame {
		cctx, cancel = context.WithTimeout(ctx, s.timeout)
	}
	defer cancel()
	err := act(cctx, s, args)
	if s.client != nil {
		if cerr := s.client.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}
	if s.closeEngine != nil {
		if cerr := s.closeEngine(); err == nil && cerr != nil {
			err = cerr
		}
	}
	switch {
	case err == nil:
	case ctx.Err() != nil:
		err = fmt.Errorf("interrupted: %w", err)
	case errors.Is(cctx.Err(), context.DeadlineExceeded):
		err = fmt.Errorf("timed out after %v (-timeout): %w", s.timeout, err)
	}
	return err
}

// redact drops the URL's password from msg, where an error may quote it:
// tq.Open redacts a URL it parses, not every form an operator may type
// ("user:secret@host:6379").
func (s *session) redact(msg string) string {
	pw := urlPassword(s.url)
	if pw == "" {
		return msg
	}
	// Followed by its "@", so that a short password does not garble the
	// rest of the message.
	msg = strings.ReplaceAll(msg, pw+"@", "xxxxx@")
	if un, err := url.PathUnescape(pw); err == nil && un != "" {
		msg = strings.ReplaceAll(msg, un+"@", "xxxxx@")
	}
	return msg
}

// urlPassword is the password in raw's user information, as written: what
// follows the first ":" of the text before the last "@" (after the
// scheme's "://"), or all of that text when it has no ":" (go-redis takes
// a lone user name as the password).
func urlPassword(raw string) string {
	if i := strings.Index(raw, "://"); i >= 0 {
		raw = raw[i+3:]
	}
	at := strings.LastIndexByte(raw, '@')
	if at < 0 {
		return ""
	}
	info := raw[:at]
	if i := strings.IndexByte(info, ':'); i >= 0 {
		return info[i+1:]
	}
	return info
}

func usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "usage: tq [-url URL] [-json] [-timeout D] <command> [flags] [args]")
	fmt.Fprintln(w, "\nFlags, the global ones too, may come before, after or among a command's\narguments; -- ends them.")
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

// openPartition opens the queue and returns an error naming the
// partitions there are unless partition has rows: List of an unknown
// partition is empty, which would read as a partition of no rows.
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
		return nil, noPartitionIn(ps, partition)
	}
	return c, nil
}

// noPartition is the error for partition, unknown: it names the
// partitions there are.
func noPartition(ctx context.Context, c *tq.Client, partition string) error {
	ps, err := c.Partitions(ctx)
	if err != nil {
		return err
	}
	return noPartitionIn(ps, partition)
}

func noPartitionIn(ps []string, partition string) error {
	if len(ps) == 0 {
		return fmt.Errorf("no partition %q (the queue has none)", partition)
	}
	return fmt.Errorf("no partition %q (partitions: %s)", partition, nameList(ps, false))
}

// maxNames is how many names an error lists before "and N more".
const maxNames = 10

// nameList is names as an error lists them: the first maxNames,
// comma-separated (quoted when quote is set: keys may hold anything),
// then how many more there are.
func nameList(names []string, quote bool) string {
	n := min(len(names), maxNames)
	parts := make([]string, n)
	for i, name := range names[:n] {
		if quote {
			name = strconvQuote(name)
		}
		parts[i] = name
	}
	out := strings.Join(parts, ", ")
	if len(names) > n {
		out += fmt.Sprintf(" and %d more", len(names)-n)
	}
	return out
}

// noKey is the error for key, not in partition: it names the keys there
// are (the first of them, by index).
func noKey(ctx context.Context, c *tq.Client, partition, key string) error {
	m, err := c.List(ctx, partition)
	if err != nil || len(m.Rows) == 0 {
		return fmt.Errorf("no key %q in partition %q", key, partition)
	}
	keys := make([]string, len(m.Rows))
	for i, r := range m.Rows {
		keys[i] = r.Key
	}
	return fmt.Errorf("no key %q in partition %q (keys: %s)", key, partition, nameList(keys, true))
}

func runPartitions(ctx context.Context, s *session, _ []string) error {
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
	// Consumption is, with -task, the task's state of the row (absent
	// for a row put after the states were read).
	Consumption *keyStateJSON `json:"consumption,omitempty"`
}

func fieldOf(fi tq.FieldInfo) fieldJSON {
	if fi.DType == "" {
		return fieldJSON{Kind: "value"}
	}
	return fieldJSON{Kind: "tensor", DType: fi.DType, Shape: append([]int{}, fi.Shape...)}
}

func defineRows(fs *flag.FlagSet) action {
	taskName := fs.String("task", "", "show this task's state (ready, waiting, leased, acked, dead, dropped) and deliveries of each row")
	fieldsFlag, given := fieldsVar(fs, "with -task: the fields the task waits for, comma-separated, to tell waiting rows from ready ones")
	return func(ctx context.Context, s *session, args []string) error {
		fields, err := fieldList(*fieldsFlag)
		if err != nil {
			return err
		}
		if *given && *taskName == "" {
			return usagef("-fields needs -task")
		}
		return runRows(ctx, s, args[0], *taskName, fields)
	}
}

func runRows(ctx context.Context, s *session, partition, task string, fields []string) error {
	c, err := s.openPartition(ctx, partition)
	if err != nil {
		return err
	}
	var states map[string]tq.KeyState
	if task != "" {
		if states, err = s.taskConsumption(ctx, c, partition, task, fields); err != nil {
			return err
		}
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
			if ks, ok := states[r.Key]; ok {
				rows[i].Consumption = keyStateOf(task, ks)
			}
		}
		return s.emitJSON(struct {
			Partition string    `json:"partition"`
			Rows      []rowJSON `json:"rows"`
		}{partition, rows})
	}
	tw := s.table()
	if task != "" {
		fmt.Fprintln(tw, "INDEX\tKEY\tSTATE\tDELIVERIES\tFIELDS\tTAG")
	} else {
		fmt.Fprintln(tw, "INDEX\tKEY\tFIELDS\tTAG")
	}
	for _, r := range m.Rows {
		cols := make([]string, 0, len(r.Fields))
		for _, f := range sortedKeys(r.Fields) {
			cols = append(cols, f+"="+fieldText(r.Fields[f]))
		}
		consumption := ""
		if task != "" {
			consumption = "-\t-\t"
			if ks, ok := states[r.Key]; ok {
				consumption = stateText(ks) + "\t" + strconv.Itoa(ks.Deliveries) + "\t"
			}
		}
		fmt.Fprintf(tw, "%d\t%s\t%s%s\t%s\n", r.Index, strconvQuote(r.Key), consumption, strings.Join(cols, " "), formatValue(map[string]any(r.Tag)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if task != "" && len(fields) == 0 {
		fmt.Fprintln(s.stdout, "\nready: every row in no other state: -fields f1,f2 tells waiting rows")
	}
	return nil
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

func defineDump(fs *flag.FlagSet) action {
	n := fs.Int("n", 8, "how many of a tensor's first elements to print")
	return func(ctx context.Context, s *session, args []string) error {
		if *n < 0 {
			return usagef("-n %d is negative", *n)
		}
		return runDump(ctx, s, *n, args[0], args[1], args[2:])
	}
}

func runDump(ctx context.Context, s *session, n int, partition, key string, fields []string) error {
	c, err := s.openPartition(ctx, partition)
	if err != nil {
		return err
	}
	m, err := c.Lookup(ctx, partition, []string{key})
	if errors.Is(err, tq.ErrNotFound) {
		return noKey(ctx, c, partition, key)
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
			return fmt.Errorf("no field %q in key %q of partition %q (it has: %s)", f, key, partition, nameList(sortedKeys(row.Fields), false))
		}
	}
	b, err := c.BatchGet(ctx, partition, []string{key}, fields...)
	if err != nil {
		return err
	}
	cells := make([]cellJSON, len(fields))
	for i, f := range fields {
		cells[i] = cellOf(b[f].Row(0), n)
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

func defineClear(fs *flag.FlagSet) action {
	yes := fs.Bool("yes", false, "really remove the rows (required)")
	fieldsFlag, given := fieldsVar(fs, "remove only these fields of every row, comma-separated; the rows stay")
	return func(ctx context.Context, s *session, args []string) error {
		if *given {
			return runClearFields(ctx, s, *yes, *fieldsFlag, args[0])
		}
		return runClear(ctx, s, *yes, args[0])
	}
}

func runClearFields(ctx context.Context, s *session, yes bool, fieldsFlag, partition string) error {
	fields, err := fieldList(fieldsFlag)
	if err != nil {
		return err
	}
	if !yes {
		return usagef("refusing to remove fields %s of every row of partition %q without -yes", fieldsFlag, partition)
	}
	c, err := s.openPartition(ctx, partition)
	if err != nil {
		return err
	}
	m, err := c.List(ctx, partition)
	if err != nil {
		return err
	}
	if err := c.ClearFields(ctx, partition, m.Keys(), fields...); err != nil {
		return err
	}
	if s.json {
		return s.emitJSON(struct {
			Partition string   `json:"partition"`
			Fields    []string `json:"fields"`
			Rows      int      `json:"rows"`
		}{partition, fields, len(m.Rows)})
	}
	fmt.Fprintf(s.stdout, "cleared fields %s of partition %s (%d rows)\n", fieldsFlag, strconvQuote(partition), len(m.Rows))
	return nil
}

func runClear(ctx context.Context, s *session, yes bool, partition string) error {
	if !yes {
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
