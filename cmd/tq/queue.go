package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/tqgo/tqgo/tq"
)

// The consumption commands: status, reset, dead, retry, drop.

// taskJSON is a task's consumption as -json prints it.
type taskJSON struct {
	Ready   int  `json:"ready"`
	Waiting int  `json:"waiting"`
	Leased  int  `json:"leased"`
	Acked   int  `json:"acked"`
	Dead    int  `json:"dead"`
	Dropped int  `json:"dropped"`
	Exact   bool `json:"exact"` // Ready and Waiting by the task's fields (-task with -fields)
}

func taskOf(ts tq.TaskStatus, exact bool) taskJSON {
	return taskJSON{Ready: ts.Ready, Waiting: ts.Waiting, Leased: ts.Leased, Acked: ts.Acked, Dead: ts.Dead, Dropped: ts.Dropped, Exact: exact}
}

// fieldList parses a -fields value: comma-separated, none empty.
func fieldList(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	fs := strings.Split(s, ",")
	for _, f := range fs {
		if f == "" {
			return nil, usagef("-fields %q has an empty field name", s)
		}
	}
	return fs, nil
}

func runStatus(ctx context.Context, s *session, cmd command, args []string) error {
	fs := s.flags(cmd)
	fieldsFlag := fs.String("fields", "", "with -task: the fields the task waits for, comma-separated, to count its Ready and Waiting exactly")
	taskName := fs.String("task", "", "count this task exactly (needs -fields)")
	rest, err := parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	fields, err := fieldList(*fieldsFlag)
	if err != nil {
		return err
	}
	if (*taskName == "") != (len(fields) == 0) {
		return usagef("-task and -fields go together")
	}
	partition := rest[0]
	c, err := s.openPartition(ctx, partition)
	if err != nil {
		return err
	}
	st, err := c.Status(ctx, partition)
	if err != nil {
		return err
	}
	tasks := map[string]taskJSON{}
	for name, ts := range st.Tasks {
		tasks[name] = taskOf(ts, false)
	}
	if *taskName != "" {
		t, err := c.Task(partition, *taskName, fields)
		if err != nil {
			return err
		}
		ts, err := t.Status(ctx)
		if err != nil {
			return err
		}
		tasks[*taskName] = taskOf(ts, true)
	}
	if s.json {
		return s.emitJSON(struct {
			Partition string              `json:"partition"`
			Rows      int                 `json:"rows"`
			Fields    map[string]int      `json:"fields"`
			Tasks     map[string]taskJSON `json:"tasks"`
		}{partition, st.Rows, st.Fields, tasks})
	}
	fmt.Fprintf(s.stdout, "partition %s: %d rows\n\n", strconvQuote(partition), st.Rows)
	tw := s.table()
	fmt.Fprintln(tw, "FIELD\tROWS")
	for _, f := range sortedKeys(st.Fields) {
		fmt.Fprintf(tw, "%s\t%d\n", f, st.Fields[f])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(tasks) == 0 {
		fmt.Fprintln(s.stdout, "\nno task has consumed from it")
		return nil
	}
	fmt.Fprintln(s.stdout)
	tw = s.table()
	fmt.Fprintln(tw, "TASK\tREADY\tWAITING\tLEASED\tACKED\tDEAD\tDROPPED")
	approx := false
	for _, name := range sortedKeys(tasks) {
		t := tasks[name]
		mark := ""
		if !t.Exact {
			mark, approx = "*", true
		}
		fmt.Fprintf(tw, "%s\t%d%s\t%d\t%d\t%d\t%d\t%d\n", name, t.Ready, mark, t.Waiting, t.Leased, t.Acked, t.Dead, t.Dropped)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if approx {
		fmt.Fprintln(s.stdout, "\n* every row in no other state, whether or not it has the task's fields: -task T -fields f1,f2 counts T exactly")
	}
	return nil
}

func runReset(ctx context.Context, s *session, cmd command, args []string) error {
	fs := s.flags(cmd)
	yes := fs.Bool("yes", false, "really forget the consumption (required)")
	rest, err := parse(fs, args, 2, -1)
	if err != nil {
		return err
	}
	partition, task, keys := rest[0], rest[1], rest[2:]
	if !*yes {
		return usagef("refusing to reset task %q of partition %q without -yes", task, partition)
	}
	c, err := s.openPartition(ctx, partition)
	if err != nil {
		return err
	}
	if err := c.ResetConsumption(ctx, partition, task, keys...); err != nil {
		return keyError(err, partition)
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

// keyError names an unknown key plainly.
func keyError(err error, partition string) error {
	var ke *tq.KeyError
	if errors.Is(err, tq.ErrNotFound) && errors.As(err, &ke) {
		return fmt.Errorf("no key %q in partition %q", ke.Key, partition)
	}
	return err
}

// taskHandle opens partition's task for Dead, Retry and Drop, which read
// only its consumption: fields (from -fields) only need to be valid, so
// without them it names the partition's own.
func (s *session) taskHandle(ctx context.Context, partition, task, fieldsFlag string) (*tq.Task, error) {
	c, err := s.openPartition(ctx, partition)
	if err != nil {
		return nil, err
	}
	fields, err := fieldList(fieldsFlag)
	if err != nil {
		return nil, err
	}
	if len(fields) == 0 {
		st, err := c.Status(ctx, partition)
		if err != nil {
			return nil, err
		}
		fields = sortedKeys(st.Fields)
	}
	if len(fields) == 0 {
		return nil, fmt.Errorf("partition %q has no fields: name the task's with -fields", partition)
	}
	return c.Task(partition, task, fields)
}

func runDead(ctx context.Context, s *session, cmd command, args []string) error {
	fs := s.flags(cmd)
	fieldsFlag := fs.String("fields", "", "the task's fields, comma-separated (default: the partition's)")
	rest, err := parse(fs, args, 2, 2)
	if err != nil {
		return err
	}
	partition, task := rest[0], rest[1]
	t, err := s.taskHandle(ctx, partition, task, *fieldsFlag)
	if err != nil {
		return err
	}
	dead, err := t.Dead(ctx)
	if err != nil {
		return err
	}
	if s.json {
		type deadJSON struct {
			Index      uint64 `json:"index"`
			Key        string `json:"key"`
			Deliveries int    `json:"deliveries"`
		}
		rows := make([]deadJSON, len(dead))
		for i, d := range dead {
			rows[i] = deadJSON{d.Index, d.Key, d.Deliveries}
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
	fmt.Fprintln(tw, "INDEX\tKEY\tDELIVERIES")
	for _, d := range dead {
		fmt.Fprintf(tw, "%d\t%s\t%d\n", d.Index, strconvQuote(d.Key), d.Deliveries)
	}
	return tw.Flush()
}

// runMark is retry and drop: Task.Retry or Task.Drop of the named keys.
func runMark(ctx context.Context, s *session, cmd command, args []string) error {
	fs := s.flags(cmd)
	fieldsFlag := fs.String("fields", "", "the task's fields, comma-separated (default: the partition's)")
	var yes *bool
	if cmd.name == "drop" {
		yes = fs.Bool("yes", false, "really drop the rows for the task (required)")
	}
	rest, err := parse(fs, args, 3, -1)
	if err != nil {
		return err
	}
	partition, task, keys := rest[0], rest[1], rest[2:]
	if yes != nil && !*yes {
		return usagef("refusing to drop rows of task %q without -yes", task)
	}
	t, err := s.taskHandle(ctx, partition, task, *fieldsFlag)
	if err != nil {
		return err
	}
	mark, verb := t.Retry, "retried"
	if cmd.name == "drop" {
		mark, verb = t.Drop, "dropped"
	}
	err = mark(ctx, keys...)
	var lost *tq.LeaseLostError
	switch {
	case errors.As(err, &lost):
		return fmt.Errorf("%d of the rows were not in a state to be %s (%s): the others were", len(lost.Keys), verb, strings.Join(lost.Keys, ", "))
	case err != nil:
		return keyError(err, partition)
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
