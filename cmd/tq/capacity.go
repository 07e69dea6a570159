package main

import (
	"context"
	"flag"
	"fmt"
	"math/big"
	"strings"

	"github.com/tqgo/tqgo/tq"
)

// The capacity command, and the capacity as status shows it.

// capacityJSON is a partition's tq.Capacity as -json prints it: 0 is no
// bound.
type capacityJSON struct {
	Rows       int64    `json:"rows"`
	Bytes      int64    `json:"bytes"`
	ClearAcked []string `json:"clear_acked,omitempty"`
}

// usedJSON is what a partition holds as its capacity counts it: committed
// rows and the new rows of puts in progress, and the bytes of their cells.
type usedJSON struct {
	Rows  int64 `json:"rows"`
	Bytes int64 `json:"bytes"`
}

// capacityOf is cp for -json: nil when the partition has none.
func capacityOf(cp tq.Capacity) *capacityJSON {
	if cp.Zero() {
		return nil
	}
	return &capacityJSON{Rows: cp.Rows, Bytes: cp.Bytes, ClearAcked: append([]string{}, cp.ClearAcked...)}
}

// capacityText is a capacity and its usage as one line shows it: "rows
// 3/100, bytes 12.5 KiB/1 GiB, cleared once acked by train, eval"; a
// part without a bound shows its usage alone.
func capacityText(cp *capacityJSON, used usedJSON) string {
	if cp == nil {
		return fmt.Sprintf("none (rows %d, bytes %s)", used.Rows, bytesText(used.Bytes))
	}
	parts := []string{boundText("rows", fmt.Sprint(used.Rows), cp.Rows, fmt.Sprint(cp.Rows)),
		boundText("bytes", bytesText(used.Bytes), cp.Bytes, bytesText(cp.Bytes))}
	if len(cp.ClearAcked) > 0 {
		parts = append(parts, "cleared once acked by "+strings.Join(cp.ClearAcked, ", "))
	}
	return strings.Join(parts, ", ")
}

// boundText is "what used/bound", or "what used (no bound)" when bound
// is 0.
func boundText(what, used string, bound int64, boundShown string) string {
	if bound == 0 {
		return what + " " + used + " (no bound)"
	}
	return what + " " + used + "/" + boundShown
}

// byteUnits are the units bytesText prints and parseSize reads, largest
// first.
var byteUnits = []struct {
	name string
	size int64
}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}

// bytesText is n bytes in the largest unit it has one of: "512 B", "1
// GiB", "12.5 KiB" (one decimal when not whole).
func bytesText(n int64) string {
	for _, u := range byteUnits {
		if n < u.size && u.size > 1 {
			continue
		}
		if n%u.size == 0 {
			return fmt.Sprintf("%d %s", n/u.size, u.name)
		}
		return fmt.Sprintf("%.1f %s", float64(n)/float64(u.size), u.name)
	}
	return fmt.Sprintf("%d B", n)
}

// parseSize reads a byte count: digits, with a fraction when a unit
// follows, and an optional unit B, KiB, MiB, GiB or TiB (any case, a
// space before it allowed): "1073741824", "512MiB", "1.5 GiB". The result
// must be a whole number of bytes that fits an int64; KB, MB and GB are
// refused, since they could mean powers of ten or of two.
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i < 0 {
		i = len(t)
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	if strings.HasPrefix(unit, "-") {
		return 0, fmt.Errorf("%q is negative", s)
	}
	if num == "" || strings.Count(num, ".") > 1 || num[0] == '.' || num[len(num)-1] == '.' {
		return 0, fmt.Errorf("%q is not a size (want bytes, or a number and a unit: 512MiB, 1.5GiB)", s)
	}
	mult := int64(1)
	if unit != "" {
		found := false
		for _, u := range byteUnits {
			if strings.EqualFold(unit, u.name) {
				mult, found = u.size, true
				break
			}
		}
		if !found {
			return 0, fmt.Errorf("%q: unknown unit %q (want B, KiB, MiB, GiB or TiB)", s, unit)
		}
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("%q is not a size", s)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	if !r.IsInt() {
		return 0, fmt.Errorf("%q is not a whole number of bytes", s)
	}
	n := r.Num()
	if !n.IsInt64() {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n.Int64(), nil
}

// capacityChange is what the capacity command's flags change: each part
// set by a flag replaces the partition's, the others are kept; off lifts
// the whole capacity.
type capacityChange struct {
	rows, bytes *int64 // nil: not given
	setTasks    bool   // -clear-acked given: clearAcked replaces the tasks
	clearAcked  []string
	off         bool
}

func (ch *capacityChange) none() bool {
	return ch.rows == nil && ch.bytes == nil && !ch.setTasks && !ch.off
}

// apply is cp changed by ch.
func (ch *capacityChange) apply(cp tq.Capacity) tq.Capacity {
	if ch.off {
		return tq.Capacity{}
	}
	cp.ClearAcked = append([]string{}, cp.ClearAcked...)
	if ch.rows != nil {
		cp.Rows = *ch.rows
	}
	if ch.bytes != nil {
		cp.Bytes = *ch.bytes
	}
	if ch.setTasks {
		cp.ClearAcked = ch.clearAcked
	}
	return cp
}

func defineCapacity(fs *flag.FlagSet) action {
	rows := fs.Int64("rows", 0, "bound the partition's rows to `N`, puts in progress included (0: no bound)")
	bytesFlag := fs.String("bytes", "", "bound the bytes of its cells to `SIZE`: bytes, or a number and a unit B, KiB, MiB, GiB, TiB (512MiB, 1.5GiB; 0: no bound)")
	tasksFlag := fs.String("clear-acked", "", "clear each row once every one of these `tasks` (comma-separated) acked or dropped it (\"\": none)")
	off := fs.Bool("off", false, "lift the capacity: no bounds, no rows cleared")
	return func(ctx context.Context, s *session, args []string) error {
		var ch capacityChange
		var err error
		fs.Visit(func(f *flag.Flag) {
			if err != nil {
				return
			}
			switch f.Name {
			case "rows":
				if *rows < 0 {
					err = usagef("-rows %d is negative", *rows)
				}
				ch.rows = rows
			case "bytes":
				var n int64
				if n, err = parseSize(*bytesFlag); err != nil {
					err = usagef("-bytes %v", err)
				}
				ch.bytes = &n
			case "clear-acked":
				ch.clearAcked, err = splitNames("-clear-acked", "task", *tasksFlag)
				ch.setTasks = true
				if err == nil {
					cp := tq.Capacity{ClearAcked: ch.clearAcked}
					if cerr := cp.Check(); cerr != nil {
						err = usagef("-clear-acked %q: %v", *tasksFlag, cerr)
					}
				}
			case "off":
				ch.off = *off
			}
		})
		if err != nil {
			return err
		}
		if ch.off && (ch.rows != nil || ch.bytes != nil || ch.setTasks) {
			return usagef("-off lifts the whole capacity: it goes without -rows, -bytes and -clear-acked")
		}
		return runCapacity(ctx, s, &ch, args[0])
	}
}

// capacityReport is the capacity command's -json document.
type capacityReport struct {
	Partition string        `json:"partition"`
	Capacity  *capacityJSON `json:"capacity,omitempty"` // absent: none
	Used      usedJSON      `json:"used"`
	Rows      int           `json:"rows"` // committed rows
}

// runCapacity prints partition's capacity and usage, after setting it
// when ch changes something. A capacity may be set on a partition with no
// rows (before a job's first put); printing one that has neither rows nor
// a capacity fails as the other commands do on an unknown partition.
func runCapacity(ctx context.Context, s *session, ch *capacityChange, partition string) error {
	c, err := s.open(ctx)
	if err != nil {
		return err
	}
	st, err := c.Status(ctx, partition)
	if err != nil {
		return err
	}
	if ch.none() {
		if !hasPartition(st) {
			return noPartition(ctx, c, partition)
		}
		return s.printCapacity(st, "capacity of partition %s: %s\n")
	}
	if err := c.SetCapacity(ctx, partition, ch.apply(st.Capacity)); err != nil {
		return err
	}
	if st, err = c.Status(ctx, partition); err != nil {
		return err
	}
	verb := "set the capacity of partition %s: %s\n"
	if ch.off {
		verb = "lifted the capacity of partition %s: %s\n"
	}
	if err := s.printCapacity(st, verb); err != nil {
		return err
	}
	if !s.json && st.Rows == 0 && st.Used.Rows == 0 {
		fmt.Fprintf(s.stdout, "partition %s has no rows yet: the capacity applies to its first puts\n", strconvQuote(partition))
	}
	return nil
}

func (s *session) printCapacity(st *tq.Status, format string) error {
	rep := capacityReport{Partition: st.Partition, Capacity: capacityOf(st.Capacity), Used: usedJSON(st.Used), Rows: st.Rows}
	if s.json {
		return s.emitJSON(rep)
	}
	_, err := fmt.Fprintf(s.stdout, format, strconvQuote(st.Partition), capacityText(rep.Capacity, rep.Used))
	return err
}

// hasPartition reports whether st is a partition's that the commands
// know: one with rows (committed, or being put) or a capacity, set
// before its first put.
func hasPartition(st *tq.Status) bool {
	return st.Rows > 0 || st.Used.Rows > 0 || !st.Capacity.Zero()
}
