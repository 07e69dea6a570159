package tqtest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// The steps of a model history: what each one is (a value that prints as
// one line and replays as it is), and how one is chosen at random from
// the model's state.

const modelPartition = "model"

// modelKeys is the key space: small, so that puts, clears and claims
// keep meeting the same rows.
var modelKeys = []string{"k0", "k1", "k2", "k3", "k4", "k5"}

// unknownKey is never put.
const unknownKey = "k9"

type tagEntry struct {
	k        string
	in, want any
}

// colSpec is one column of a put: its kind and each row's cell.
type colSpec struct {
	field string
	kind  string // "values", "jagged" (float32 rows), "stacked" (int64 [rows, 2])
	cells []pair
}

// putSpec is a BatchPut, Put or tags-only BatchPut.
type putSpec struct {
	keys []string
	cols []colSpec
	tags [][]tagEntry // nil: no tags; a nil row: that row's tag stays as it is
	bad  string       // "dup" (a key twice) or "nan" (a NaN tag): must fail with ErrInvalid
}

func (p *putSpec) batch() tq.Batch {
	b := tq.Batch{}
	for _, c := range p.cols {
		switch c.kind {
		case "values":
			vals := make([]any, len(c.cells))
			for i, cell := range c.cells {
				vals[i] = cell.in
			}
			b[c.field] = tq.Values(vals)
		case "jagged":
			rows := make([][]float32, len(c.cells))
			for i, cell := range c.cells {
				rows[i] = cell.in.([]float32)
			}
			b[c.field] = tq.JaggedOf(rows)
		case "stacked":
			var flat []int64
			for _, cell := range c.cells {
				flat = append(flat, cell.in.([]int64)...)
			}
			b[c.field] = tq.Stacked(flat, len(c.cells), 2)
		}
	}
	return b
}

func (p *putSpec) tqTags() []tq.Tag {
	if p.tags == nil {
		return nil
	}
	out := make([]tq.Tag, len(p.tags))
	for i, row := range p.tags {
		if row == nil {
			continue
		}
		t := tq.Tag{}
		for _, e := range row {
			t[e.k] = e.in
		}
		out[i] = t
	}
	return out
}

func (p *putSpec) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%q", p.keys)
	for _, c := range p.cols {
		fmt.Fprintf(&b, " %s=%s(", c.field, c.kind)
		for i, cell := range c.cells {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(showIn(cell.in))
		}
		b.WriteString(")")
	}
	if p.tags != nil {
		b.WriteString(" tags=[")
		for i, row := range p.tags {
			if i > 0 {
				b.WriteString(" ")
			}
			if row == nil {
				b.WriteString("nil")
				continue
			}
			b.WriteString("{")
			for j, e := range row {
				if j > 0 {
					b.WriteString(" ")
				}
				b.WriteString(e.k + ":" + showIn(e.in))
			}
			b.WriteString("}")
		}
		b.WriteString("]")
	}
	return b.String()
}

// mop is one step of a history.
type mop struct {
	num     int    // the step's number in the history it was generated in
	kind    string // see gen
	slot    int    // which client: 0 or 1
	task    string
	rank    int
	lease   int // for settles: the num of the claim that made the lease
	keys    []string
	all     bool // settle or reset every row (no keys)
	fields  []string
	n, min  int // a claim's n and AtLeast (0: none)
	data    bool
	d       time.Duration
	version int64
	put     *putSpec
	note    string // what running the step found, for the history
}

func (o *mop) String() string {
	c := fmt.Sprintf("c%d ", o.slot)
	task := o.task
	if o.task == "rk" {
		task = fmt.Sprintf("rk[rank %d]", o.rank)
	}
	var s string
	switch o.kind {
	case "put":
		s = c + "BatchPut " + o.put.String()
	case "badput":
		s = c + "BatchPut(invalid: " + o.put.bad + ") " + o.put.String()
	case "put1":
		s = c + "Put " + o.put.String()
	case "tags":
		s = c + "BatchPut(tags only) " + o.put.String()
	case "clear":
		s = fmt.Sprintf("%sClear %q", c, o.keys)
	case "clearp":
		s = c + "ClearPartition"
	case "clearf":
		s = fmt.Sprintf("%sClearFields %q fields %q", c, o.keys, o.fields)
	case "get":
		s = fmt.Sprintf("%sBatchGet %q fields %q", c, o.keys, o.fields)
	case "list":
		s = c + "List"
	case "lookup":
		s = fmt.Sprintf("%sLookup %q", c, o.keys)
		if o.data {
			s += fmt.Sprintf(", then c%d BatchGetByMeta fields %q", 1-o.slot, o.fields)
		}
	case "claim", "wait":
		name := "Claim"
		if o.kind == "wait" {
			name = "Wait"
		}
		s = fmt.Sprintf("%s%s.%s(%d", c, task, name, o.n)
		if o.min > 0 {
			s += fmt.Sprintf(", AtLeast(%d)", o.min)
		}
		if o.data {
			s += ", WithData()"
		}
		s += ")"
	case "ack", "nack", "extend":
		name := map[string]string{"ack": "Ack", "nack": "Nack", "extend": "Extend"}[o.kind]
		var args []string
		if o.kind != "ack" {
			args = append(args, o.d.String())
		}
		if !o.all {
			args = append(args, fmt.Sprintf("%q", o.keys))
		}
		s = fmt.Sprintf("%slease#%d.%s(%s)", c, o.lease, name, strings.Join(args, ", "))
	case "advance":
		s = fmt.Sprintf("Advance(%v)", o.d)
	case "reset":
		if o.all {
			s = fmt.Sprintf("%sResetConsumption(%s)", c, o.task)
		} else {
			s = fmt.Sprintf("%sResetConsumption(%s, %q)", c, o.task, o.keys)
		}
	case "dead":
		s = c + task + ".Dead()"
	case "retry":
		s = fmt.Sprintf("%s%s.Retry(%q)", c, task, o.keys)
	case "drop":
		s = fmt.Sprintf("%s%s.Drop(%q)", c, task, o.keys)
	case "status":
		s = c + "Status"
	case "tstatus":
		s = c + task + ".Status()"
	case "version":
		s = fmt.Sprintf("%s%s.SetVersion(%d)", c, task, o.version)
	case "reopen":
		s = c + "Close, Open (its leases abandoned)"
	case "capacity":
		s = fmt.Sprintf("%sSetCapacity(rows %d, clear after %q)", c, o.n, o.fields)
	case "stragglers":
		s = c + task + ".Stragglers()"
	case "pace":
		s = fmt.Sprintf("%sPace(\"ver\", v %d, k %d, %q)", c, o.version, o.n, o.fields)
	case "insert", "sample":
		s = fmt.Sprintf("%sAwait%s(%s, Ratio{1, MinSize %d, ErrorBuffer %d}, %d)", c,
			map[string]string{"insert": "Insert", "sample": "Sample"}[o.kind], o.task, o.min, o.version, o.n)
	default:
		s = o.kind
	}
	if o.note != "" {
		s += "  -> " + o.note
	}
	return fmt.Sprintf("#%d %s", o.num, s)
}

// gen chooses the next step at random, from what the model holds.
func (r *runner) gen(rng *rand.Rand, num int) mop {
	type choice struct {
		kind string
		w    int
	}
	choices := []choice{
		{"put", 14}, {"put1", 4}, {"tags", 3}, {"badput", 1}, {"clear", 3}, {"clearp", 1},
		{"get", 5}, {"list", 4}, {"lookup", 4},
		{"claim", 18}, {"wait", 3},
		{"ack", 7}, {"nack", 5}, {"extend", 3},
		{"reset", 3}, {"dead", 2}, {"retry", 2}, {"drop", 2},
		{"status", 3}, {"tstatus", 4}, {"version", 1}, {"reopen", 1},
		{"capacity", 1},
		{"clearf", 3},
		{"stragglers", 2}, {"pace", 2}, {"insert", 1}, {"sample", 1},
	}
	if r.env.Advance != nil {
		choices = append(choices, choice{"advance", 5})
	}
	if no := os.Getenv("TQ_MODEL_NO"); no != "" {
		for i := range choices {
			if slices.Contains(strings.Split(no, ","), choices[i].kind) {
				choices[i].w = 0
			}
		}
	}
	total := 0
	for _, c := range choices {
		total += c.w
	}
	x := rng.IntN(total)
	kind := ""
	for _, c := range choices {
		if x < c.w {
			kind = c.kind
			break
		}
		x -= c.w
	}
	op := mop{num: num, kind: kind, slot: rng.IntN(2)}
	tasks := modelTasks()
	pickTask := func() {
		td := tasks[rng.IntN(len(tasks))]
		op.task = td.name
		op.rank = rng.IntN(2)
	}
	switch kind {
	case "put", "put1", "tags", "badput":
		op.put = r.genPut(rng, kind)
	case "clear":
		op.keys = r.someKeys(rng, 1+rng.IntN(2), 0.8)
	case "clearf":
		op.keys = r.someKeys(rng, 1+rng.IntN(3), 0.85)
		op.fields = [][]string{{"a"}, {"b"}, {"a", "b"}, {"b", "a"}}[rng.IntN(4)]
	case "get":
		op.keys = r.someKeys(rng, 1+rng.IntN(3), 0.85)
		op.fields = someFields(rng)
	case "lookup":
		op.keys = r.someKeys(rng, 1+rng.IntN(3), 0.9)
		op.data = rng.IntN(2) == 0
		op.fields = someFields(rng)
	case "claim", "wait":
		pickTask()
		td := r.tasks[op.task]
		switch {
		case td.ranks:
			op.n = r.rkN
		case td.groups:
			op.n = 2 + rng.IntN(4)
			if rng.IntN(20) == 0 {
				op.n = 1 // fewer than a group: ErrInvalid
			}
		case kind == "wait":
			op.n = 1 + rng.IntN(3)
		default:
			op.n = 1 + rng.IntN(4)
		}
		if rng.IntN(2) == 0 {
			op.min = 1 + rng.IntN(op.n)
		}
		op.data = rng.IntN(6) == 0
	case "ack", "nack", "extend":
		l := r.pickLease(rng)
		if l == nil {
			op.kind = "claim"
			op.task, op.n = "plain", 2
			break
		}
		op.lease = l.id
		if rng.IntN(2) == 0 || len(l.rows) == 1 {
			op.all = true
		} else {
			for _, lr := range l.rows {
				if rng.IntN(2) == 0 {
					op.keys = append(op.keys, lr.key)
				}
			}
			if len(op.keys) == 0 {
				op.keys = []string{l.rows[0].key}
			}
		}
		if !op.all && rng.IntN(25) == 0 {
			op.keys = append(op.keys, unknownKey) // not in the lease: ErrInvalid
		}
		switch kind {
		case "nack":
			op.d = r.delays[rng.IntN(len(r.delays))]
		case "extend":
			op.d = r.extends[rng.IntN(len(r.extends))]
		}
	case "advance":
		op.d = []time.Duration{time.Second, 4 * time.Second, 9 * time.Second, 12 * time.Second, 31 * time.Second}[rng.IntN(5)]
		for r.m.deadlines()[r.m.now+op.d] {
			op.d += 7 * time.Millisecond
		}
	case "reset":
		pickTask()
		if rng.IntN(5) < 2 {
			op.all = true
		} else {
			op.keys = r.someKeys(rng, 1+rng.IntN(2), 0.9)
		}
	case "dead", "retry", "drop":
		pickTask()
		if rng.IntN(5) < 3 {
			op.task = "maxdel"
		}
		if kind != "dead" {
			op.keys = r.someKeys(rng, 1+rng.IntN(2), 0.9)
		}
	case "tstatus":
		pickTask()
	case "stragglers":
		op.task = []string{"grp", "gdl", "gst"}[rng.IntN(3)]
	case "pace":
		op.fields = [][]string{{"plain"}, {"stale"}, {"two", "maxdel"}, {"gdl"}}[rng.IntN(4)]
		op.version = int64(rng.IntN(5))
		op.n = rng.IntN(3)
	case "insert", "sample":
		op.task = []string{"plain", "stale", "grp"}[rng.IntN(3)]
		op.n = 1 + rng.IntN(2)
		op.min = rng.IntN(4)
		op.version = int64(rng.IntN(4))
	case "version":
		op.task = "stale"
		op.version = int64(rng.IntN(5))
	case "capacity":
		op.n = []int{0, 2, 3, 4, 6}[rng.IntN(5)]
		op.fields = [][]string{nil, {"plain"}, {"plain", "two"}, {"grp"}, {"stale"}, {"rk"}}[rng.IntN(6)]
	}
	return op
}

// someKeys returns n distinct keys, each one of the partition's rows with
// probability known (when there are rows), else any key of the key space
// or, rarely, a key never put.
func (r *runner) someKeys(rng *rand.Rand, n int, known float64) []string {
	var live []string
	for _, row := range r.m.sorted() {
		live = append(live, row.key)
	}
	var out []string
	for range n * 4 {
		if len(out) == n {
			break
		}
		var k string
		switch {
		case len(live) > 0 && rng.Float64() < known:
			k = live[rng.IntN(len(live))]
		case rng.IntN(12) == 0:
			k = unknownKey
		default:
			k = modelKeys[rng.IntN(len(modelKeys))]
		}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

func someFields(rng *rand.Rand) []string {
	switch rng.IntN(5) {
	case 0, 1:
		return nil // every field
	case 2:
		return []string{"a", "b"}
	case 3:
		return []string{"b"}
	}
	return []string{"a"}
}

// pickLease chooses a lease of a client still open, most often one that
// still holds some row.
func (r *runner) pickLease(rng *rand.Rand) *mlease {
	var holding, open []*mlease
	for _, id := range r.leaseIDs {
		l := r.leases[id]
		if l == nil {
			continue
		}
		open = append(open, l)
		for _, lr := range l.rows {
			if rec := r.m.rec(l.task, lr.id); rec != nil && rec.state == mLeased && rec.token == l.token {
				holding = append(holding, l)
				break
			}
		}
	}
	if len(holding) > 0 && rng.IntN(5) > 0 {
		return holding[rng.IntN(len(holding))]
	}
	if len(open) > 0 {
		return open[rng.IntN(len(open))]
	}
	return nil
}

// genPut makes a put: new and existing keys, one or two fields of a
// random kind, tags with values of every kind a tag holds.
func (r *runner) genPut(rng *rand.Rand, kind string) *putSpec {
	n := 1 + rng.IntN(3)
	if kind == "put1" {
		n = 1
	}
	if kind == "tags" {
		n = 1 + rng.IntN(2)
	}
	p := &putSpec{keys: r.someKeys(rng, n, 0.5)}
	if slices.Contains(p.keys, unknownKey) {
		p.keys = slices.DeleteFunc(p.keys, func(k string) bool { return k == unknownKey })
		if len(p.keys) == 0 {
			p.keys = []string{modelKeys[rng.IntN(len(modelKeys))]}
		}
	}
	n = len(p.keys)
	if kind != "tags" {
		var fields []string
		if rng.IntN(4) > 0 {
			fields = append(fields, "a")
		}
		if rng.IntN(5) < 2 || len(fields) == 0 {
			fields = append(fields, "b")
		}
		if kind == "put1" && len(fields) == 2 && rng.IntN(2) == 0 {
			fields = fields[:1]
		}
		fp := fieldPairs()
		for _, f := range fields {
			c := colSpec{field: f}
			switch rng.IntN(4) {
			case 0:
				c.kind = "jagged"
			case 1:
				c.kind = "stacked"
			default:
				c.kind = "values"
			}
			for range n {
				switch c.kind {
				case "jagged":
					c.cells = append(c.cells, jaggedCell(rng))
				case "stacked":
					c.cells = append(c.cells, stackedCell(rng))
				default:
					c.cells = append(c.cells, fp[rng.IntN(len(fp))])
				}
			}
			p.cols = append(p.cols, c)
		}
	}
	if kind == "tags" || rng.IntN(5) < 3 {
		p.tags = make([][]tagEntry, n)
		for i := range n {
			if kind != "tags" && rng.IntN(4) == 0 {
				continue // this row's tag stays as it is
			}
			row := []tagEntry{}
			if rng.IntN(5) < 2 {
				u := uidPairs()[rng.IntN(3)]
				row = append(row, tagEntry{"uid", u.in, u.want})
			}
			if rng.IntN(5) < 2 {
				vp := verPairs()
				v := vp[rng.IntN(len(vp))]
				row = append(row, tagEntry{"ver", v.in, v.want})
			}
			if rng.IntN(2) == 0 {
				tp := tagPairs()
				v := tp[rng.IntN(len(tp))]
				row = append(row, tagEntry{"x", v.in, v.want})
			}
			p.tags[i] = row
		}
		if kind == "tags" && p.tags[0] == nil {
			p.tags[0] = []tagEntry{}
		}
	}
	if kind == "badput" {
		if len(p.keys) > 1 && rng.IntN(2) == 0 {
			p.bad = "dup"
			p.keys[len(p.keys)-1] = p.keys[0]
		} else {
			p.bad = "nan"
			if p.tags == nil {
				p.tags = make([][]tagEntry, n)
			}
			p.tags[n-1] = append(p.tags[n-1], tagEntry{"x", math.NaN(), nil})
		}
	}
	return p
}
