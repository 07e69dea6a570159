package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// The consumption commands: status, reset, dead, retry, drop.

// taskJSON is a task's consumption as -json prints it, and as the status
// table shows it through taskColumns.
type taskJSON struct {
	Ready   int `json:"ready"`
	Waiting int `json:"waiting"`
	Leased  int `json:"leased"`
	Acked   int `json:"acked"`
	Dead    int `json:"dead"`
	Dropped int `json:"dropped"`
	// Redelivered: ready or leased rows delivered before without an ack.
	Redelivered int `json:"redelivered"`
	// DeadLeaseEnded: dead rows whose last lease ended unsettled (the
	// others died of an error); LastDead: the row that died last, and why.
	DeadLeaseEnded int          `json:"dead_lease_ended"`
	LastDead       *deadRowJSON `json:"last_dead,omitempty"`
	Leases         []leaseJSON  `json:"leases,omitempty"`
	// Groups: for a task that claims groups, those waiting for members.
	Groups []groupJSON `json:"groups,omitempty"`
	Exact  bool        `json:"exact"` // Ready and Waiting by the task's fields (-task with -fields)
}

// groupJSON is a group waiting for missing members.
type groupJSON struct {
	ID      string    `json:"id"`
	Rows    int       `json:"rows"`
	Since   time.Time `json:"since"`
	Overdue bool      `json:"overdue"` // past the task's group deadline
}

// leaseJSON is one running lease: who holds it, how many rows, since and
// until when.
type leaseJSON struct {
	Holder     string    `json:"holder"`
	Rows       int       `json:"rows"`
	Granted    time.Time `json:"granted"`
	Until      time.Time `json:"until"`
	Deliveries int       `json:"deliveries"` // the most among its rows
}

// deadRowJSON is a dead row and why it died.
type deadRowJSON struct {
	Key        string    `json:"key"`
	Deliveries int       `json:"deliveries"`
	Reason     string    `json:"reason,omitempty"`
	At         time.Time `json:"at"`
}

func taskOf(ts tq.TaskStatus, exact bool) taskJSON {
	t := taskJSON{Ready: ts.Ready, Waiting: ts.Waiting, Leased: ts.Leased, Acked: ts.Acked, Dead: ts.Dead, Dropped: ts.Dropped,
		Redelivered: ts.Redelivered, DeadLeaseEnded: ts.DeadLeaseEnded, Exact: exact}
	if d := ts.LastDead; d != nil {
		t.LastDead = &deadRowJSON{Key: d.Key, Deliveries: d.Deliveries, Reason: d.Reason, At: d.At}
	}
	for _, l := range ts.Leases {
		t.Leases = append(t.Leases, leaseJSON{Holder: l.Holder, Rows: l.Rows, Granted: l.Granted, Until: l.Until, Deliveries: l.Deliveries})
	}
	for _, g := range ts.Groups {
		t.Groups = append(t.Groups, groupJSON{ID: g.ID, Rows: g.Rows, Since: g.Since, Overdue: g.Overdue})
	}
	return t
}

// memberJSON is a process's presence (see tq.Client.Announce).
type memberJSON struct {
	Group string    `json:"group"`
	Name  string    `json:"name"`
	State string    `json:"state"` // alive, gone (not seen for 3 intervals) or left
	Seen  time.Time `json:"seen"`
}

// taskColumns are the status table's columns after TASK, in order. A new
// column (a lease's holders or deadline, say) is a field of taskJSON,
// filled by taskOf, and an entry here.
var taskColumns = []struct {
	head string
	cell func(t taskJSON) string
}{
	{"READY", func(t taskJSON) string {
		if !t.Exact {
			return strconv.Itoa(t.Ready) + "*" // see statusFootnote
		}
		return strconv.Itoa(t.Ready)
	}},
	{"WAITING", func(t taskJSON) string { return strconv.Itoa(t.Waiting) }},
	{"LEASED", func(t taskJSON) string { return strconv.Itoa(t.Leased) }},
	{"ACKED", func(t taskJSON) string { return strconv.Itoa(t.Acked) }},
	{"DEAD", func(t taskJSON) string { return strconv.Itoa(t.Dead) }},
	{"DROPPED", func(t taskJSON) string { return strconv.Itoa(t.Dropped) }},
	{"REDELIVERED", func(t taskJSON) string { return strconv.Itoa(t.Redelivered) }},
}

// statusFootnote explains the "*" of a Ready not counted exactly.
const statusFootnote = "* every row in no other state, whether or not it has the task's fields: -task T -fields f1,f2 counts T exactly"

// statusJSON is status's report: what -json prints, and the table shows.
type statusJSON struct {
	Partition string              `json:"partition"`
	Rows      int                 `json:"rows"`
	Fields    map[string]int      `json:"fields"`
	Tasks     map[string]taskJSON `json:"tasks"`
	Members   []memberJSON        `json:"members,omitempty"`
	Capacity  *capacityJSON       `json:"capacity,omitempty"` // absent: none
	Used      usedJSON            `json:"used"`               // as the capacity counts
}

// fieldsVar adds the -fields flag to fs: a list of fields (see fieldList),
// refused when empty, which would name none. It returns the
// value and whether the flag was given.
func fieldsVar(fs *flag.FlagSet, usage string) (value *string, given *bool) {
	v := fieldsValue{s: new(string), given: new(bool)}
	fs.Var(v, "fields", usage)
	return v.s, v.given
}

type fieldsValue struct {
	s     *string
	given *bool
}

func (v fieldsValue) String() string {
	if v.s == nil {
		return ""
	}
	return *v.s
}

func (v fieldsValue) Set(s string) error {
	if s == "" {
		return errors.New("names no field (leave -fields out for the default)")
	}
	if _, err := fieldList(s); err != nil {
		return err
	}
	*v.s, *v.given = s, true
	return nil
}

// fieldList parses a -fields value: comma-separated, none empty.
func fieldList(s string) ([]string, error) { return splitNames("-fields", "field", s) }

// splitNames parses the value s of flag, a comma-separated list of names
// of what, none empty; "" is none.
func splitNames(flag, what, s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	names := strings.Split(s, ",")
	for _, n := range names {
		if n == "" {
			return nil, usagef("%s %q has an empty %s name", flag, s, what)
		}
	}
	return names, nil
}

// partitionStatus opens the queue and returns partition's status, or an
// error naming the partitions there are when it has neither rows nor a
// capacity (one set before the job's first put makes it known).
func (s *session) partitionStatus(ctx context.Context, partition string) (*tq.Client, *tq.Status, error) {
	c, err := s.open(ctx)
	if err != nil {
		return nil, nil, err
	}
	st, err := c.Status(ctx, partition)
	if err != nil {
		return nil, nil, err
	}
	if !hasPartition(st) {
		return nil, nil, noPartition(ctx, c, partition)
	}
	return c, st, nil
}

// checkFields returns an error naming the partition's fields unless some
// row has each of fields: a name mistyped would have a task wait for
// ever (status would count every row Waiting).
func checkFields(st *tq.Status, fields []string) error {
	for _, f := range fields {
		if st.Fields[f] == 0 {
			return fmt.Errorf("no field %q in partition %q (fields: %s)", f, st.Partition, nameList(sortedKeys(st.Fields), false))
		}
	}
	return nil
}

// checkTask returns an error naming the partition's tasks unless task has
// state in it: retry or drop would create the task a mistyped name names
// (drop -new-task does so on purpose), and dead or reset would report
// nothing to do.
func checkTask(st *tq.Status, task string) error {
	if _, ok := st.Tasks[task]; ok {
		return nil
	}
	if len(st.Tasks) == 0 {
		return fmt.Errorf("no task %q in partition %q (no task has consumed from it)", task, st.Partition)
	}
	return fmt.Errorf("no task %q in partition %q (tasks: %s)", task, st.Partition, nameList(sortedKeys(st.Tasks), false))
}

func defineStatus(fs *flag.FlagSet) action {
	fieldsFlag, _ := fieldsVar(fs, "with -task: the fields the task waits for, comma-separated, to count its Ready and Waiting exactly")
	taskName := fs.String("task", "", "count this task exactly (needs -fields; it need not have consumed yet)")
	return func(ctx context.Context, s *session, args []string) error {
		fields, err := fieldList(*fieldsFlag)
		if err != nil {
			return err
		}
		if (*taskName == "") != (len(fields) == 0) {
			return usagef("-task and -fields go together")
		}
		rep, err := s.status(ctx, args[0], *taskName, fields)
		if err != nil {
			return err
		}
		if s.json {
			return s.emitJSON(rep)
		}
		return s.printStatus(rep)
	}
}

// status gathers partition's status report; with task, that task counted
// exactly by fields.
func (s *session) status(ctx context.Context, partition, task string, fields []string) (*statusJSON, error) {
	c, st, err := s.partitionStatus(ctx, partition)
	if err != nil {
		return nil, err
	}
	if err := checkFields(st, fields); err != nil {
		return nil, err
	}
	rep := &statusJSON{Partition: partition, Rows: st.Rows, Fields: st.Fields, Tasks: map[string]taskJSON{},
		Capacity: capacityOf(st.Capacity), Used: usedJSON(st.Used)}
	for name, ts := range st.Tasks {
		rep.Tasks[name] = taskOf(ts, false)
	}
	if task != "" {
		t, err := c.Task(partition, task, fields)
		if err != nil {
			return nil, err
		}
		ts, err := t.Status(ctx)
		if err != nil {
			return nil, err
		}
		rep.Tasks[task] = taskOf(ts, true)
	}
	ms, err := c.Members(ctx, "")
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		rep.Members = append(rep.Members, memberJSON{Group: m.Group, Name: m.Name, State: m.State(), Seen: m.Seen})
	}
	return rep, nil
}

// printStatus writes rep as tables: the rows per field, then a row per
// task of taskColumns.
func (s *session) printStatus(rep *statusJSON) error {
	fmt.Fprintf(s.stdout, "partition %s: %d rows\n", strconvQuote(rep.Partition), rep.Rows)
	if rep.Capacity != nil {
		fmt.Fprintf(s.stdout, "capacity: %s\n", capacityText(rep.Capacity, rep.Used))
	}
	fmt.Fprintln(s.stdout)
	tw := s.table()
	fmt.Fprintln(tw, "FIELD\tROWS")
	for _, f := range sortedKeys(rep.Fields) {
		fmt.Fprintf(tw, "%s\t%d\n", f, rep.Fields[f])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rep.Tasks) == 0 {
		fmt.Fprintln(s.stdout, "\nno task has consumed from it")
		return nil
	}
	fmt.Fprintln(s.stdout)
	tw = s.table()
	heads := []string{"TASK"}
	for _, col := range taskColumns {
		heads = append(heads, col.head)
	}
	fmt.Fprintln(tw, strings.Join(heads, "\t"))
	approx := false
	for _, name := range sortedKeys(rep.Tasks) {
		t := rep.Tasks[name]
		cells := []string{name}
		for _, col := range taskColumns {
			cells = append(cells, col.cell(t))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
		approx = approx || !t.Exact
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if approx {
		fmt.Fprintln(s.stdout, "\n"+statusFootnote)
	}
	now := time.Now()
	leased := false
	for _, name := range sortedKeys(rep.Tasks) {
		leased = leased || len(rep.Tasks[name].Leases) > 0
	}
	if leased {
		fmt.Fprintln(s.stdout)
		tw = s.table()
		fmt.Fprintln(tw, "TASK\tHOLDER\tROWS\tENDS IN\tDELIVERIES")
		for _, name := range sortedKeys(rep.Tasks) {
			for _, l := range rep.Tasks[name].Leases {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%v\t%d\n", name, l.Holder, l.Rows, l.Until.Sub(now).Round(100*time.Millisecond), l.Deliveries)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	died := false
	for _, name := range sortedKeys(rep.Tasks) {
		died = died || rep.Tasks[name].LastDead != nil
	}
	if died {
		// Why rows died: of their lease's end (a consumer too slow, or
		// gone) or of an error; the last one's reason (tq dead lists all).
		fmt.Fprintln(s.stdout)
		tw = s.table()
		fmt.Fprintln(tw, "TASK\tDEAD\tLEASE ENDED\tLAST DEAD\tAGO\tREASON")
		for _, name := range sortedKeys(rep.Tasks) {
			t := rep.Tasks[name]
			if d := t.LastDead; d != nil {
				ago := "-"
				if !d.At.IsZero() {
					ago = max(now.Sub(d.At), 0).Round(100 * time.Millisecond).String()
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\n", name, t.Dead, t.DeadLeaseEnded, strconvQuote(d.Key), ago, reasonText(d.Reason))
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	waiting := false
	for _, name := range sortedKeys(rep.Tasks) {
		waiting = waiting || len(rep.Tasks[name].Groups) > 0
	}
	if waiting {
		// The groups incomplete, oldest first: a straggler shows here.
		fmt.Fprintln(s.stdout)
		tw = s.table()
		fmt.Fprintln(tw, "TASK\tWAITING GROUP\tROWS\tWAITING FOR\tOVERDUE")
		for _, name := range sortedKeys(rep.Tasks) {
			for _, g := range rep.Tasks[name].Groups {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%v\t%v\n", name, g.ID, g.Rows, now.Sub(g.Since).Round(100*time.Millisecond), g.Overdue)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(rep.Members) > 0 {
		fmt.Fprintln(s.stdout)
		tw = s.table()
		fmt.Fprintln(tw, "GROUP\tMEMBER\tSTATE\tSEEN")
		for _, m := range rep.Members {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%v ago\n", m.Group, m.Name, m.State, now.Sub(m.Seen).Round(100*time.Millisecond))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func defineReset(fs *flag.FlagSet) action {
	yes := fs.Bool("yes", false, "really forget the consumption (required)")
	return func(ctx context.Context, s *session, args []string) error {
		return runReset(ctx, s, *yes, args[0], args[1], args[2:])
	}
}

func runReset(ctx context.Context, s *session, yes bool, partition, task string, keys []string) error {
	if !yes {
		return usagef("refusing to reset task %q of partition %q without -yes", task, partition)
	}
	c, st, err := s.partitionStatus(ctx, partition)
	if err != nil {
		return err
	}
	if err := checkTask(st, task); err != nil {
		return err
	}
	if err := c.ResetConsumption(ctx, partition, task, keys...); err != nil {
		return keyError(ctx, c, err, partition)
	}
	what := "every row"
	if len(keys) > 0 {
		what = fmt.Sprintf("%d rows", len(keys))
	}
	if s.json {
		return s.emitJSON(struct {
			Partition string   `json:"partition"`
			Task      string   `json:"task"`
			Keys      []string `json:"keys"` // empty: every row
		}{partition, task, append([]string{}, keys...)})
	}
	fmt.Fprintf(s.stdout, "reset task %s of partition %s: %s ready again\n", strconvQuote(task), strconvQuote(partition), what)
	return nil
}

// keyError names an unknown key plainly, and the keys there are.
func keyError(ctx context.Context, c *tq.Client, err error, partition string) error {
	var ke *tq.KeyError
	if errors.Is(err, tq.ErrNotFound) && errors.As(err, &ke) {
		return noKey(ctx, c, partition, ke.Key)
	}
	return err
}

// taskHandle opens partition's task for Dead, Retry and Drop, which read
// only its consumption: fields (from -fields) only need to be valid, so
// without them it names the partition's own. The task must exist unless
// newTask is set, and each of fields be some row's.
func (s *session) taskHandle(ctx context.Context, partition, task, fieldsFlag string, newTask bool) (*tq.Client, *tq.Task, error) {
	fields, err := fieldList(fieldsFlag)
	if err != nil {
		return nil, nil, err
	}
	c, st, err := s.partitionStatus(ctx, partition)
	if err != nil {
		return nil, nil, err
	}
	if err := checkTask(st, task); err != nil && !newTask {
		return nil, nil, err
	}
	if err := checkFields(st, fields); err != nil {
		return nil, nil, err
	}
	if len(fields) == 0 {
		fields = sortedKeys(st.Fields)
	}
	if len(fields) == 0 {
		return nil, nil, fmt.Errorf("partition %q has no fields: name the task's with -fields", partition)
	}
	t, err := c.Task(partition, task, fields)
	return c, t, err
}

func defineDead(fs *flag.FlagSet) action {
	fieldsFlag, _ := fieldsVar(fs, "the task's fields, comma-separated (default: the partition's)")
	return func(ctx context.Context, s *session, args []string) error {
		return runDead(ctx, s, *fieldsFlag, args[0], args[1])
	}
}

func runDead(ctx context.Context, s *session, fieldsFlag, partition, task string) error {
	_, t, err := s.taskHandle(ctx, partition, task, fieldsFlag, false)
	if err != nil {
		return err
	}
	dead, err := t.Dead(ctx)
	if err != nil {
		return err
	}
	if s.json {
		type deadJSON struct {
			Index      uint64     `json:"index"`
			Key        string     `json:"key"`
			Deliveries int        `json:"deliveries"`
			Reason     string     `json:"reason,omitempty"` // its last error
			At         *time.Time `json:"at,omitempty"`     // when
		}
		rows := make([]deadJSON, len(dead))
		for i, d := range dead {
			rows[i] = deadJSON{Index: d.Index, Key: d.Key, Deliveries: d.Deliveries, Reason: d.Reason}
			if !d.At.IsZero() {
				at := d.At
				rows[i].At = &at
			}
		}
		return s.emitJSON(struct {
			Partition string     `json:"partition"`
			Task      string     `json:"task"`
			Dead      []deadJSON `json:"dead"`
		}{partition, task, rows})
	}
	if len(dead) == 0 {
		fmt.Fprintf(s.stdout, "task %s of partition %s has no dead rows\n", strconvQuote(task), strconvQuote(partition))
		return nil
	}
	tw := s.table()
	fmt.Fprintln(tw, "INDEX\tKEY\tDELIVERIES\tAT\tREASON")
	for _, d := range dead {
		at := "-"
		if !d.At.IsZero() {
			at = d.At.UTC().Format(time.RFC3339)
		}
		reason := reasonText(d.Reason)
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\n", d.Index, strconvQuote(d.Key), d.Deliveries, at, reason)
	}
	return tw.Flush()
}

// reasonText is a dead row's reason as the tables show it: quoted, "-"
// for none.
func reasonText(reason string) string {
	if reason == "" {
		return "-"
	}
	return strconvQuote(reason)
}

// defineMark is retry and drop (name): Task.Retry or Task.Drop of the
// named keys.
func defineMark(name string) func(fs *flag.FlagSet) action {
	return func(fs *flag.FlagSet) action {
		fieldsFlag, _ := fieldsVar(fs, "the task's fields, comma-separated (default: the partition's)")
		yes, newTask := new(bool), new(bool)
		if name == "drop" {
			yes = fs.Bool("yes", false, "really drop the rows for the task (required)")
			newTask = fs.Bool("new-task", false, "drop for a task that has no state in the partition yet (this creates it)")
		}
		return func(ctx context.Context, s *session, args []string) error {
			if name == "drop" && !*yes {
				return usagef("refusing to drop rows of task %q without -yes", args[1])
			}
			return runMark(ctx, s, name, *fieldsFlag, *newTask, args[0], args[1], args[2:])
		}
	}
}

func runMark(ctx context.Context, s *session, name, fieldsFlag string, newTask bool, partition, task string, keys []string) error {
	c, t, err := s.taskHandle(ctx, partition, task, fieldsFlag, newTask)
	if err != nil {
		return err
	}
	mark, verb := t.Retry, "retried"
	if name == "drop" {
		mark, verb = t.Drop, "dropped"
	}
	err = mark(ctx, keys...)
	var lost *tq.LeaseLostError
	switch {
	case errors.As(err, &lost):
		return fmt.Errorf("%d of the rows were not in a state to be %s (%s): the others were", len(lost.Keys), verb, strings.Join(lost.Keys, ", "))
	case err != nil:
		return keyError(ctx, c, err, partition)
	}
	if s.json {
		return s.emitJSON(struct {
			Partition string   `json:"partition"`
			Task      string   `json:"task"`
			Keys      []string `json:"keys"`
		}{partition, task, keys})
	}
	fmt.Fprintf(s.stdout, "%s %d rows of task %s of partition %s\n", verb, len(keys), strconvQuote(task), strconvQuote(partition))
	return nil
}
