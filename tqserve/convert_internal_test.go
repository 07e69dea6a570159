package tqserve

import (
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/tqserve/tqpb"
)

// Rows decoded together share a Fields map where their fields are alike,
// and only there; every row reads back what was sent.
func TestFromRowsSharesAlikeFields(t *testing.T) {
	f := func(gen uint64, shape ...int64) map[string]metadata.FieldInfo {
		return map[string]metadata.FieldInfo{"x": {DType: "int64", Shape: shape, Gen: gen}}
	}
	in := []*metadata.Row{
		{Key: "a", Index: 1, Fields: f(1, 2)},
		{Key: "b", Index: 2, Fields: f(1, 2)},
		{Key: "c", Index: 3, Fields: f(2, 2)}, // another generation
		{Key: "d", Index: 4, Fields: f(2, 3)}, // another shape
		{Key: "e", Index: 5, Fields: f(2)},    // no shape
		{Key: "f", Index: 6, Fields: f(2)},
	}
	pb, err := toRows(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := fromRows(pb)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range out {
		want := in[i].Fields["x"]
		got := r.Fields["x"]
		if r.Key != in[i].Key || got.Gen != want.Gen || got.DType != want.DType || len(got.Shape) != len(want.Shape) || (got.Shape == nil) != (want.Shape == nil) {
			t.Errorf("row %d: %+v, want %+v", i, r, in[i])
		}
	}
	shared := func(i, j int) bool {
		// Same map: a write through one shows in the other.
		return len(out[i].Fields) > 0 && mapID(out[i].Fields) == mapID(out[j].Fields)
	}
	for _, c := range []struct {
		i, j int
		want bool
	}{{0, 1, true}, {1, 2, false}, {2, 3, false}, {3, 4, false}, {4, 5, true}} {
		if got := shared(c.i, c.j); got != c.want {
			t.Errorf("rows %d and %d share their fields: %v, want %v", c.i, c.j, got, c.want)
		}
	}
}

// A field named twice on the wire: the last counts, as when the list is
// read as a map.
func TestFromFieldsLastWins(t *testing.T) {
	got := fromFields([]*tqpb.FieldEntry{
		{Name: "x", Info: &tqpb.FieldInfo{Gen: 1}},
		{Name: "x", Info: &tqpb.FieldInfo{Gen: 2}},
	})
	if len(got) != 1 || got["x"].Gen != 2 {
		t.Fatalf("fields %v, want x at gen 2", got)
	}
}

// mapID identifies a map by its header's address.
func mapID(m map[string]metadata.FieldInfo) uintptr {
	return reflect.ValueOf(m).Pointer()
}

// Rows of several alike fields, each row with a map of its own, share
// their Fields once they crossed the wire: the fields are listed in one
// order, not each map's iteration order.
func TestFromRowsSharesAlikeFieldsOfSeveral(t *testing.T) {
	var in []*metadata.Row
	for i := range 16 {
		in = append(in, &metadata.Row{Key: fmt.Sprint(i), Index: uint64(i), Fields: map[string]metadata.FieldInfo{
			"input_ids": {DType: "int64", Shape: []int64{4}, Gen: 1},
			"responses": {DType: "int64", Shape: []int64{4}, Gen: 1},
			"rewards":   {DType: "float32", Shape: []int64{}, Gen: 1},
			"mask":      {DType: "bool", Shape: []int64{4}, Gen: 1},
		}})
	}
	pb, err := toRows(in)
	if err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(&tqpb.RowsReply{Rows: pb})
	if err != nil {
		t.Fatal(err)
	}
	var r tqpb.RowsReply
	if err := proto.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	out, err := fromRows(r.GetRows())
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(out); i++ {
		if mapID(out[i].Fields) != mapID(out[i-1].Fields) {
			t.Fatalf("rows %d and %d, alike, do not share their fields", i-1, i)
		}
	}
	if got := out[0].Fields; !reflect.DeepEqual(got, in[0].Fields) {
		t.Fatalf("fields %v, want %v", got, in[0].Fields)
	}
}

// A claim's reply asked compact says once what its rows and deliveries
// share, and reads back as the whole reply does; one not asked compact
// (an older client's) is whole.
func TestCompactClaimReply(t *testing.T) {
	at := func(s int64) time.Time { return time.Unix(1_700_000_000+s, 123) }
	a := map[string]metadata.FieldInfo{"x": {DType: "int64", Shape: []int64{4}, Gen: 1}}
	alike := func() map[string]metadata.FieldInfo {
		return map[string]metadata.FieldInfo{"x": {DType: "int64", Shape: []int64{4}, Gen: 1}}
	}
	other := map[string]metadata.FieldInfo{"y": {}}
	c := metadata.Claimed{Lease: "w|8000000000000001", Until: at(30), Waiting: "", Mark: metadata.Mark{Seq: 9}}
	for i, f := range []map[string]metadata.FieldInfo{a, a, a, alike(), alike(), other, other, nil} {
		r := &metadata.Row{Key: fmt.Sprint("k", i), Index: uint64(10 + i), Fields: f}
		if i == 2 {
			r.Tag = map[string]any{"uid": "p1"}
		}
		c.Rows = append(c.Rows, r)
		d := metadata.Delivery{Index: r.Index, State: metadata.Leased, Deliveries: 1, Lease: c.Lease, Holder: "w", Until: c.Until, Granted: at(0)}
		switch i {
		case 6: // another rank's share of a batch
			d.Lease, d.Holder, d.Until = "v|8000000000000002", "v", at(40)
		case 7: // delivered before, a reason kept
			d.Deliveries, d.Reason, d.At = 2, "lease ended", at(-5)
		}
		c.Deliveries = append(c.Deliveries, d)
		c.Units = append(c.Units, []int{i})
	}
	read := func(compact bool) (*tqpb.ClaimReply, metadata.Claimed, int) { return claimOnWire(t, &c, compact, nil) }
	whole, fromWhole, wholeSize := read(false)
	compact, fromCompact, compactSize := read(true)
	for i, r := range whole.GetRows() {
		if r.GetFieldsAsPrevious() || whole.GetDeliveries()[i].GetAsClaim() {
			t.Errorf("row %d of a reply not asked compact: compact", i)
		}
	}
	if whole.GetUnitsByRow() || len(whole.GetUnits()) != len(c.Units) || !compact.GetUnitsByRow() || len(compact.GetUnits()) != 0 {
		t.Errorf("units by row: whole %v (%d units), compact %v (%d units)", whole.GetUnitsByRow(), len(whole.GetUnits()), compact.GetUnitsByRow(), len(compact.GetUnits()))
	}
	if !reflect.DeepEqual(fromCompact.Units, c.Units) {
		t.Errorf("compact reply's units read back as %v, want %v", fromCompact.Units, c.Units)
	}
	if whole.GetHolder() != "" || whole.GetGranted() != nil {
		t.Errorf("a reply not asked compact names a holder %q and a grant %v", whole.GetHolder(), whole.GetGranted())
	}
	wantPrev := []bool{false, true, true, true, true, false, true, false}
	wantAs := []bool{true, true, true, true, true, true, false, true}
	for i, r := range compact.GetRows() {
		if r.GetFieldsAsPrevious() != wantPrev[i] {
			t.Errorf("compact row %d: fields as the previous row's %v, want %v", i, r.GetFieldsAsPrevious(), wantPrev[i])
		}
		if d := compact.GetDeliveries()[i]; d.GetAsClaim() != wantAs[i] {
			t.Errorf("compact delivery %d: as the claim's %v, want %v", i, d.GetAsClaim(), wantAs[i])
		}
	}
	if !reflect.DeepEqual(fromCompact, fromWhole) {
		t.Errorf("compact reply read back as\n%+v\nthe whole one as\n%+v", fromCompact, fromWhole)
	}
	for i, d := range fromCompact.Deliveries {
		want := c.Deliveries[i]
		if d.Lease != want.Lease || d.Holder != want.Holder || !d.Until.Equal(want.Until) || !d.Granted.Equal(want.Granted) || !d.At.Equal(want.At) || d.Reason != want.Reason {
			t.Errorf("delivery %d read back as %+v, want %+v", i, d, want)
		}
	}
	for i, r := range fromCompact.Rows {
		if !reflect.DeepEqual(r.Fields, c.Rows[i].Fields) || r.Key != c.Rows[i].Key || !reflect.DeepEqual(r.Tag, c.Rows[i].Tag) {
			t.Errorf("row %d read back as %+v, want %+v", i, r, c.Rows[i])
		}
	}
	if compactSize >= wholeSize {
		t.Errorf("compact reply %d bytes, the whole one %d", compactSize, wholeSize)
	}
}

// claimOnWire is c as a server's reply carries it (compact or whole),
// read back by a client (remembering fields in memo, if not nil), and its
// size on the wire.
func claimOnWire(t *testing.T, c *metadata.Claimed, compact bool, memo *fieldMemo) (*tqpb.ClaimReply, metadata.Claimed, int) {
	t.Helper()
	pb, err := toClaimed(c, 0, compact)
	if err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(pb)
	if err != nil {
		t.Fatal(err)
	}
	var wire tqpb.ClaimReply
	if err := proto.Unmarshal(b, &wire); err != nil {
		t.Fatal(err)
	}
	got, err := fromClaimedWith(&wire, 0, memo)
	if err != nil {
		t.Fatal(err)
	}
	return pb, got, len(b)
}

// A claim whose rows are all its own, leased for the first time or not,
// with no reason, says its deliveries as counts alone when compact, and
// reads back as the whole reply does.
func TestCompactClaimReplyCounts(t *testing.T) {
	at := func(s int64) time.Time { return time.Unix(1_700_000_000+s, 456) }
	f := map[string]metadata.FieldInfo{"x": {DType: "int64", Shape: []int64{4}, Gen: 1}}
	c := metadata.Claimed{Lease: "w|8000000000000003", Until: at(30), Mark: metadata.Mark{Seq: 4}}
	for i := range 8 {
		c.Rows = append(c.Rows, &metadata.Row{Key: fmt.Sprint("k", i), Index: uint64(40 + i), Fields: f})
		c.Deliveries = append(c.Deliveries, metadata.Delivery{Index: uint64(40 + i), State: metadata.Leased, Deliveries: 1 + i%3,
			Lease: c.Lease, Holder: "w", Until: c.Until, Granted: at(0), Max: 5})
		c.Units = append(c.Units, []int{i})
	}
	whole, fromWhole, wholeSize := claimOnWire(t, &c, false, nil)
	compact, fromCompact, compactSize := claimOnWire(t, &c, true, nil)
	if len(whole.GetDeliveryCounts()) != 0 || len(whole.GetDeliveries()) != len(c.Rows) {
		t.Errorf("whole reply: %d delivery counts, %d deliveries", len(whole.GetDeliveryCounts()), len(whole.GetDeliveries()))
	}
	if len(compact.GetDeliveries()) != 0 || len(compact.GetDeliveryCounts()) != len(c.Rows) || compact.GetDeliveryMax() != 5 {
		t.Errorf("compact reply: %d deliveries, %d delivery counts, max %d", len(compact.GetDeliveries()), len(compact.GetDeliveryCounts()), compact.GetDeliveryMax())
	}
	if !reflect.DeepEqual(fromCompact, fromWhole) {
		t.Errorf("compact reply read back as\n%+v\nthe whole one as\n%+v", fromCompact, fromWhole)
	}
	for i, d := range fromCompact.Deliveries {
		want := c.Deliveries[i]
		if d.Index != want.Index || d.State != want.State || d.Deliveries != want.Deliveries || d.Max != want.Max || d.Lease != want.Lease ||
			d.Holder != want.Holder || !d.Until.Equal(want.Until) || !d.Granted.Equal(want.Granted) {
			t.Errorf("delivery %d read back as %+v, want %+v", i, d, want)
		}
	}
	if compactSize >= wholeSize/2 {
		t.Errorf("compact reply %d bytes, the whole one %d", compactSize, wholeSize)
	}
	// One row with a reason (delivered before, its lease ended): the
	// deliveries go one by one.
	c.Deliveries[3].Reason, c.Deliveries[3].At = metadata.ReasonLeaseEnded, at(-1)
	compact, fromCompact, _ = claimOnWire(t, &c, true, nil)
	if len(compact.GetDeliveryCounts()) != 0 || len(compact.GetDeliveries()) != len(c.Rows) {
		t.Errorf("compact reply with a reason: %d delivery counts, %d deliveries", len(compact.GetDeliveryCounts()), len(compact.GetDeliveries()))
	}
	if d := fromCompact.Deliveries[3]; d.Reason != metadata.ReasonLeaseEnded || !d.At.Equal(at(-1)) {
		t.Errorf("delivery with a reason read back as %+v", d)
	}
}

// A reply that says a row's fields or a delivery are shared where there
// is nothing to share them with is malformed.
func TestCompactClaimReplyMalformed(t *testing.T) {
	row := func(prev bool) *tqpb.Row { return &tqpb.Row{Key: "k", Index: 1, FieldsAsPrevious: prev} }
	for name, r := range map[string]*tqpb.ClaimReply{
		"first row's fields as previous": {Lease: "l", Rows: []*tqpb.Row{row(true)}},
		"fields as previous and fields": {Lease: "l", Rows: []*tqpb.Row{row(false), {Key: "j", FieldsAsPrevious: true,
			Fields: []*tqpb.FieldEntry{{Name: "x", Info: &tqpb.FieldInfo{}}}}}},
		"units by row, and units":         {Lease: "l", Rows: []*tqpb.Row{row(false)}, UnitsByRow: true, Units: []*tqpb.Positions{{Positions: []int64{0}}}},
		"delivery counts with no lease":   {Rows: []*tqpb.Row{row(false)}, DeliveryCounts: []int64{1}},
		"delivery counts not one per row": {Lease: "l", Rows: []*tqpb.Row{row(false)}, DeliveryCounts: []int64{1, 1}},
		"delivery counts and deliveries": {Lease: "l", Rows: []*tqpb.Row{row(false)}, DeliveryCounts: []int64{1},
			Deliveries: []*tqpb.Delivery{{Index: 1, State: tqpb.Delivery_LEASED, Lease: "l"}}},
		"as the claim's with no lease": {Rows: []*tqpb.Row{row(false)}, Deliveries: []*tqpb.Delivery{{Index: 1, AsClaim: true}}},
		"as the claim's with its own":  {Lease: "l", Rows: []*tqpb.Row{row(false)}, Deliveries: []*tqpb.Delivery{{Index: 1, AsClaim: true, Lease: "m"}}},
	} {
		if _, err := fromClaimed(r, 0); err == nil {
			t.Errorf("%s: read with no error", name)
		}
	}
}

// Only units that are each row alone, in order, go as units_by_row.
func TestUnitsByRow(t *testing.T) {
	for _, c := range []struct {
		units [][]int
		n     int
		want  bool
	}{
		{[][]int{{0}, {1}, {2}}, 3, true},
		{[][]int{{0, 1}, {2}}, 3, false}, // a group
		{[][]int{{1}, {0}}, 2, false},    // out of order
		{[][]int{{0}}, 2, false},         // a row in no unit
		{nil, 0, false},
	} {
		if got := unitsByRow(c.units, c.n); got != c.want {
			t.Errorf("unitsByRow(%v, %d) = %v, want %v", c.units, c.n, got, c.want)
		}
	}
}

// Replies decoded with one fieldMemo share the fields map of rows that
// list their fields alike, across replies, and only those; decoding from
// many goroutines at once is safe.
func TestFieldMemo(t *testing.T) {
	f := func(gen uint64) map[string]metadata.FieldInfo {
		return map[string]metadata.FieldInfo{"x": {DType: "int64", Shape: []int64{2}, Gen: gen}}
	}
	reply := func(gen uint64) *tqpb.ClaimReply {
		c := metadata.Claimed{Rows: []*metadata.Row{{Key: "k", Index: 1, Fields: f(gen)}}}
		r, err := toClaimed(&c, 0, true)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	var memo fieldMemo
	read := func(r *tqpb.ClaimReply, memo *fieldMemo) map[string]metadata.FieldInfo {
		c, err := fromClaimedWith(r, 0, memo)
		if err != nil {
			t.Fatal(err)
		}
		return c.Rows[0].Fields
	}
	a, b := read(reply(1), &memo), read(reply(1), &memo)
	if mapID(a) != mapID(b) || !reflect.DeepEqual(a, f(1)) {
		t.Errorf("two replies of alike fields: maps %x and %x, %v", mapID(a), mapID(b), a)
	}
	if c := read(reply(2), &memo); mapID(c) == mapID(b) || !reflect.DeepEqual(c, f(2)) {
		t.Errorf("a reply of other fields shares the map: %v", c)
	}
	if d, e := read(reply(1), nil), read(reply(1), nil); mapID(d) == mapID(e) {
		t.Error("replies decoded with no memo share a map")
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for range 100 {
				gen := uint64(g % 3)
				if got := read(reply(gen), &memo); !reflect.DeepEqual(got, f(gen)) {
					t.Errorf("read %v, want %v", got, f(gen))
					return
				}
			}
		})
	}
	wg.Wait()
}

// sameFields and sameFieldInfos compare every attribute of a field, as
// the wire and metadata.FieldInfo carry it: a new attribute must be
// compared there too (or alike fields would share a stale map), and this
// test says so when one is added.
func TestSameFieldsComparesEveryAttribute(t *testing.T) {
	var meta []string
	for f := range reflect.TypeFor[metadata.FieldInfo]().Fields() {
		meta = append(meta, f.Name)
	}
	var wire []string
	for f := range reflect.TypeFor[tqpb.FieldInfo]().Fields() {
		if f.IsExported() {
			wire = append(wire, f.Name)
		}
	}
	if want := []string{"DType", "Shape", "Gen", "BackendTag"}; !reflect.DeepEqual(meta, want) {
		t.Errorf("metadata.FieldInfo has %v, sameFieldInfos compares %v", meta, want)
	}
	if want := []string{"Dtype", "Shape", "HasShape", "Gen", "BackendTag"}; !reflect.DeepEqual(wire, want) {
		t.Errorf("tqpb.FieldInfo has %v, sameFields compares %v", wire, want)
	}
}
