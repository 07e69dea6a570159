package tqserve

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/tqserve/tqpb"
)

// The conversions between package metadata's types and the wire's. Times
// travel by the server's clock (see tqpb.Moment); skew is the server's
// clock minus this process's (zero on the server).

func toMoment(t time.Time, skew time.Duration) *tqpb.Moment {
	if t.IsZero() {
		return nil
	}
	return &tqpb.Moment{UnixNs: t.Add(skew).UnixNano()}
}

// moments hands out Moments from one allocation (a reply's times).
type moments []tqpb.Moment

// at is toMoment, from ms while it has room.
func (ms *moments) at(t time.Time, skew time.Duration) *tqpb.Moment {
	if t.IsZero() {
		return nil
	}
	if len(*ms) == 0 {
		return toMoment(t, skew)
	}
	m := &(*ms)[0]
	*ms = (*ms)[1:]
	m.UnixNs = t.Add(skew).UnixNano()
	return m
}

func fromMoment(m *tqpb.Moment, skew time.Duration) time.Time {
	if m == nil {
		return time.Time{}
	}
	return time.Unix(0, m.UnixNs).Add(-skew)
}

// Tags.

func toTagMap(m map[string]any) (*tqpb.TagMap, error) {
	if m == nil {
		return nil, nil
	}
	out := &tqpb.TagMap{Values: make(map[string]*tqpb.TagValue, len(m))}
	for k, v := range m {
		tv, err := toTagValue(v)
		if err != nil {
			return nil, fmt.Errorf("tag %q: %w", k, err)
		}
		out.Values[k] = tv
	}
	return out, nil
}

func toTagValue(v any) (*tqpb.TagValue, error) {
	switch x := v.(type) {
	case nil:
		return &tqpb.TagValue{Kind: &tqpb.TagValue_IsNil{IsNil: true}}, nil
	case bool:
		return &tqpb.TagValue{Kind: &tqpb.TagValue_BoolValue{BoolValue: x}}, nil
	case string:
		return &tqpb.TagValue{Kind: &tqpb.TagValue_StringValue{StringValue: x}}, nil
	case int64:
		return &tqpb.TagValue{Kind: &tqpb.TagValue_IntValue{IntValue: x}}, nil
	case uint64:
		return &tqpb.TagValue{Kind: &tqpb.TagValue_UintValue{UintValue: x}}, nil
	case float64:
		return &tqpb.TagValue{Kind: &tqpb.TagValue_FloatValue{FloatValue: x}}, nil
	case []byte:
		return &tqpb.TagValue{Kind: &tqpb.TagValue_BytesValue{BytesValue: x}}, nil
	case []any:
		l := &tqpb.TagList{Values: make([]*tqpb.TagValue, len(x))}
		for i, e := range x {
			tv, err := toTagValue(e)
			if err != nil {
				return nil, err
			}
			l.Values[i] = tv
		}
		return &tqpb.TagValue{Kind: &tqpb.TagValue_ListValue{ListValue: l}}, nil
	case map[string]any:
		m, err := toTagMap(x)
		if err != nil {
			return nil, err
		}
		return &tqpb.TagValue{Kind: &tqpb.TagValue_MapValue{MapValue: m}}, nil
	}
	return nil, fmt.Errorf("tag value of type %T (want nil, bool, string, int64, uint64, float64, []byte, []any or map[string]any)", v)
}

func fromTagMap(m *tqpb.TagMap) (map[string]any, error) {
	if m == nil {
		return nil, nil
	}
	out := make(map[string]any, len(m.Values))
	for k, v := range m.Values {
		x, err := fromTagValue(v)
		if err != nil {
			return nil, fmt.Errorf("tag %q: %w", k, err)
		}
		out[k] = x
	}
	return out, nil
}

func fromTagValue(v *tqpb.TagValue) (any, error) {
	switch x := v.GetKind().(type) {
	case *tqpb.TagValue_IsNil:
		return nil, nil
	case *tqpb.TagValue_BoolValue:
		return x.BoolValue, nil
	case *tqpb.TagValue_StringValue:
		return x.StringValue, nil
	case *tqpb.TagValue_IntValue:
		return x.IntValue, nil
	case *tqpb.TagValue_UintValue:
		return x.UintValue, nil
	case *tqpb.TagValue_FloatValue:
		return x.FloatValue, nil
	case *tqpb.TagValue_BytesValue:
		if x.BytesValue == nil {
			return []byte{}, nil
		}
		return x.BytesValue, nil
	case *tqpb.TagValue_ListValue:
		l := make([]any, len(x.ListValue.GetValues()))
		for i, e := range x.ListValue.GetValues() {
			y, err := fromTagValue(e)
			if err != nil {
				return nil, err
			}
			l[i] = y
		}
		return l, nil
	case *tqpb.TagValue_MapValue:
		m, err := fromTagMap(x.MapValue)
		if err != nil {
			return nil, err
		}
		if m == nil {
			m = map[string]any{}
		}
		return m, nil
	}
	return nil, fmt.Errorf("tag value of no kind")
}

// Rows.

// toFields lists the fields of m by name, so that alike maps list alike
// (which a reader's fromRows shares).
func toFields(m map[string]metadata.FieldInfo) []*tqpb.FieldEntry {
	if m == nil {
		return nil
	}
	// One allocation for the entries and one for their infos.
	out := make([]*tqpb.FieldEntry, 0, len(m))
	entries := make([]tqpb.FieldEntry, len(m))
	infos := make([]tqpb.FieldInfo, len(m))
	i := 0
	for f, fi := range m {
		infos[i] = tqpb.FieldInfo{Dtype: fi.DType, Shape: fi.Shape, HasShape: fi.Shape != nil, Gen: fi.Gen, BackendTag: fi.BackendTag}
		entries[i] = tqpb.FieldEntry{Name: f, Info: &infos[i]}
		out = append(out, &entries[i])
		i++
	}
	slices.SortFunc(out, func(a, b *tqpb.FieldEntry) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// fromFields is the fields of a row as the wire lists them (a name given
// twice: the last counts, as in a map).
func fromFields(es []*tqpb.FieldEntry) map[string]metadata.FieldInfo {
	if es == nil {
		return nil
	}
	out := make(map[string]metadata.FieldInfo, len(es))
	for _, e := range es {
		fi := e.GetInfo()
		shape := fi.GetShape()
		if fi.GetHasShape() && shape == nil {
			shape = []int64{}
		}
		out[e.GetName()] = metadata.FieldInfo{DType: fi.GetDtype(), Shape: shape, Gen: fi.GetGen(), BackendTag: fi.GetBackendTag()}
	}
	return out
}

func toRow(r *metadata.Row) (*tqpb.Row, error) {
	out := &tqpb.Row{}
	return out, toRowSharing(out, r, nil, false)
}

// toRowSharing fills out with r, listing r's fields as prev (not nil)
// does when r's fields are prev's (messages are only read once built),
// or, with compact, saying so (Row.fields_as_previous).
func toRowSharing(out *tqpb.Row, r *metadata.Row, prev *tqpb.Row, compact bool) error {
	tag, err := toTagMap(r.Tag)
	if err != nil {
		return fmt.Errorf("row %q: %w", r.Key, err)
	}
	out.Key, out.Index, out.Tag = r.Key, r.Index, tag
	switch {
	case prev != nil && compact:
		out.FieldsAsPrevious = true
	case prev != nil:
		out.Fields = prev.Fields
	default:
		out.Fields = toFields(r.Fields)
	}
	return nil
}

func fromRow(r *tqpb.Row) (*metadata.Row, error) {
	return fromRowSharing(r, nil, nil)
}

// fromRowSharing is fromRow, giving the row prev's Fields map when r's
// fields are prevFields' or r says they are prev's (rows are read-only
// and may share their maps: the rows of a claim or a listing mostly hold
// the same fields alike).
func fromRowSharing(r *tqpb.Row, prev *metadata.Row, prevFields []*tqpb.FieldEntry) (*metadata.Row, error) {
	out := &metadata.Row{}
	return out, fillRow(out, r, prev, prevFields, nil)
}

// fillRow is fromRowSharing, into out; a row whose fields are memo's
// (not nil) gets its map.
func fillRow(out *metadata.Row, r *tqpb.Row, prev *metadata.Row, prevFields []*tqpb.FieldEntry, memo *fieldMemo) error {
	tag, err := fromTagMap(r.GetTag())
	if err != nil {
		return fmt.Errorf("row %q: %w", r.GetKey(), err)
	}
	*out = metadata.Row{Key: r.GetKey(), Index: r.GetIndex(), Tag: tag}
	switch {
	case r.GetFieldsAsPrevious():
		if prev == nil || len(r.GetFields()) > 0 {
			return fmt.Errorf("row %q: fields as the previous row's, with no previous row or with fields", r.GetKey())
		}
		out.Fields = prev.Fields
	case prev != nil && sameFields(r.GetFields(), prevFields):
		out.Fields = prev.Fields
	default:
		out.Fields = memo.fields(r.GetFields())
	}
	return nil
}

// A fieldMemo keeps the fields of the last row it decoded, so that the
// rows of the next reply listing them alike (the rows of one put, claimed
// a few at a time) share the same map (rows are read-only). Safe for
// concurrent use; a nil *fieldMemo remembers nothing.
type fieldMemo struct{ last atomic.Pointer[memoFields] }

type memoFields struct {
	wire []*tqpb.FieldEntry
	m    map[string]metadata.FieldInfo
}

// fields is fromFields(es), the map of the last call if es lists the same
// fields alike.
func (fm *fieldMemo) fields(es []*tqpb.FieldEntry) map[string]metadata.FieldInfo {
	if fm == nil || len(es) == 0 {
		return fromFields(es)
	}
	if l := fm.last.Load(); l != nil && sameFields(es, l.wire) {
		return l.m
	}
	m := fromFields(es)
	fm.last.Store(&memoFields{wire: es, m: m})
	return m
}

// sameFields reports whether a and b list the same fields alike, in the
// same order.
func sameFields(a, b []*tqpb.FieldEntry) bool {
	if len(a) != len(b) || (a == nil) != (b == nil) {
		return false
	}
	for i, e := range a {
		x, y := e.GetInfo(), b[i].GetInfo()
		if e.GetName() != b[i].GetName() || x.GetDtype() != y.GetDtype() || x.GetHasShape() != y.GetHasShape() ||
			x.GetGen() != y.GetGen() || x.GetBackendTag() != y.GetBackendTag() || !slices.Equal(x.GetShape(), y.GetShape()) {
			return false
		}
	}
	return true
}

func toRows(rows []*metadata.Row) ([]*tqpb.Row, error) {
	return toRowList(rows, false)
}

// toRowList is toRows, with compact as ClaimRequest.compact asks.
func toRowList(rows []*metadata.Row, compact bool) ([]*tqpb.Row, error) {
	out := make([]*tqpb.Row, len(rows))
	slab := make([]tqpb.Row, len(rows))
	for i, r := range rows {
		if r == nil {
			return nil, fmt.Errorf("a nil row among rows")
		}
		var prev *tqpb.Row
		if i > 0 && r.Fields != nil && (metadata.SameMap(r.Fields, rows[i-1].Fields) || sameFieldInfos(r.Fields, rows[i-1].Fields)) {
			prev = out[i-1]
		}
		if err := toRowSharing(&slab[i], r, prev, compact); err != nil {
			return nil, err
		}
		out[i] = &slab[i]
	}
	return out, nil
}

// sameFieldInfos reports whether a and b hold the same fields alike.
func sameFieldInfos(a, b map[string]metadata.FieldInfo) bool {
	if len(a) != len(b) || (a == nil) != (b == nil) {
		return false
	}
	for f, x := range a {
		y, ok := b[f]
		if !ok || x.DType != y.DType || x.Gen != y.Gen || x.BackendTag != y.BackendTag ||
			(x.Shape == nil) != (y.Shape == nil) || !slices.Equal(x.Shape, y.Shape) {
			return false
		}
	}
	return true
}

func fromRows(rows []*tqpb.Row) ([]*metadata.Row, error) { return fromRowsWith(rows, nil) }

// fromRowsWith is fromRows, remembering fields in memo (see fieldMemo).
func fromRowsWith(rows []*tqpb.Row, memo *fieldMemo) ([]*metadata.Row, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	out := make([]*metadata.Row, len(rows))
	slab := make([]metadata.Row, len(rows))
	var prevFields []*tqpb.FieldEntry // the fields of the row before, as the wire listed them
	for i, r := range rows {
		var prev *metadata.Row
		if i > 0 {
			prev = out[i-1]
		}
		if err := fillRow(&slab[i], r, prev, prevFields, memo); err != nil {
			return nil, err
		}
		if !r.GetFieldsAsPrevious() {
			prevFields = r.GetFields()
		}
		out[i] = &slab[i]
	}
	return out, nil
}

func toRefs(refs []metadata.Ref) []*tqpb.Ref {
	out := make([]*tqpb.Ref, len(refs))
	for i, r := range refs {
		out[i] = &tqpb.Ref{Index: r.Index, Field: r.Field, Gen: r.Gen, Tag: r.Tag}
	}
	return out
}

func fromRefs(refs []*tqpb.Ref) []metadata.Ref {
	if len(refs) == 0 {
		return nil
	}
	out := make([]metadata.Ref, len(refs))
	for i, r := range refs {
		out[i] = metadata.Ref{Index: r.GetIndex(), Field: r.GetField(), Gen: r.GetGen(), Tag: r.GetTag()}
	}
	return out
}

func toUpdates(us []metadata.RowUpdate) ([]*tqpb.RowUpdate, error) {
	out := make([]*tqpb.RowUpdate, len(us))
	for i, u := range us {
		tag, err := toTagMap(u.Tag)
		if err != nil {
			return nil, fmt.Errorf("row %q: %w", u.Key, err)
		}
		out[i] = &tqpb.RowUpdate{Key: u.Key, Index: u.Index, Fields: toFields(u.Fields), Tag: tag}
	}
	return out, nil
}

func fromUpdates(us []*tqpb.RowUpdate) ([]metadata.RowUpdate, error) {
	out := make([]metadata.RowUpdate, len(us))
	for i, u := range us {
		tag, err := fromTagMap(u.GetTag())
		if err != nil {
			return nil, fmt.Errorf("row %q: %w", u.GetKey(), err)
		}
		out[i] = metadata.RowUpdate{Key: u.GetKey(), Index: u.GetIndex(), Fields: fromFields(u.GetFields()), Tag: tag}
	}
	return out, nil
}

// Capacity, usage, marks.

func toCapacity(c metadata.Capacity) *tqpb.Capacity {
	return &tqpb.Capacity{Rows: c.Rows, Bytes: c.Bytes, ClearAcked: c.ClearAcked}
}

func fromCapacity(c *tqpb.Capacity) metadata.Capacity {
	return metadata.Capacity{Rows: c.GetRows(), Bytes: c.GetBytes(), ClearAcked: c.GetClearAcked()}
}

func toUsage(u metadata.Usage) *tqpb.Usage { return &tqpb.Usage{Rows: u.Rows, Bytes: u.Bytes} }

func fromUsage(u *tqpb.Usage) metadata.Usage {
	return metadata.Usage{Rows: u.GetRows(), Bytes: u.GetBytes()}
}

func toMark(m metadata.Mark, skew time.Duration) *tqpb.Mark {
	return &tqpb.Mark{Seq: m.Seq, Wake: toMoment(m.Wake, skew), Consumed: m.Consumed, Consume: m.Consume, Token: m.Token}
}

func fromMark(m *tqpb.Mark, skew time.Duration) metadata.Mark {
	return metadata.Mark{Seq: m.GetSeq(), Wake: fromMoment(m.GetWake(), skew), Consumed: m.GetConsumed(), Consume: m.GetConsume(), Token: m.GetToken()}
}

// Consumption.

func toDeliveries(ds []metadata.Delivery, skew time.Duration) []*tqpb.Delivery {
	return toDeliveryList(ds, skew, nil)
}

// toDeliveryList is toDeliveries; with claim (a compact ClaimReply's
// lease, holder, until and granted, as the server's clock has them), a
// delivery that has them all says so (Delivery.as_claim) instead.
func toDeliveryList(ds []metadata.Delivery, skew time.Duration, claim *metadata.Delivery) []*tqpb.Delivery {
	out := make([]*tqpb.Delivery, len(ds))
	slab := make([]tqpb.Delivery, len(ds))
	times := 0
	for _, d := range ds {
		times += nonZero(d.Until) + nonZero(d.At) + nonZero(d.Granted)
	}
	ms := make(moments, times)
	for i, d := range ds {
		pd := &slab[i]
		pd.Index, pd.State, pd.Deliveries, pd.Max = d.Index, tqpb.Delivery_State(d.State), int64(d.Deliveries), int64(d.Max)
		pd.Reason, pd.At = d.Reason, ms.at(d.At, skew)
		if claim != nil && claimOwns(claim, &d) {
			pd.AsClaim = true
		} else {
			pd.Lease, pd.Holder, pd.Until, pd.Granted = d.Lease, d.Holder, ms.at(d.Until, skew), ms.at(d.Granted, skew)
		}
		out[i] = pd
	}
	return out
}

func nonZero(t time.Time) int {
	if t.IsZero() {
		return 0
	}
	return 1
}

// fromDeliveries converts deliveries off the wire, a delivery with
// as_claim given claim's lease, holder, until and granted (an error
// without claim).
func fromDeliveries(ds []*tqpb.Delivery, skew time.Duration, claim *metadata.Delivery) ([]metadata.Delivery, error) {
	out := make([]metadata.Delivery, len(ds))
	for i, d := range ds {
		out[i] = metadata.Delivery{
			Index: d.GetIndex(), State: metadata.State(d.GetState()), Deliveries: int(d.GetDeliveries()),
			Lease: d.GetLease(), Holder: d.GetHolder(), Until: fromMoment(d.GetUntil(), skew), Max: int(d.GetMax()),
			Reason: d.GetReason(), At: fromMoment(d.GetAt(), skew), Granted: fromMoment(d.GetGranted(), skew),
		}
		if d.GetAsClaim() {
			if claim == nil || d.GetLease() != "" || d.GetHolder() != "" || d.GetUntil() != nil || d.GetGranted() != nil {
				return nil, fmt.Errorf("delivery of row %d: as the claim's, outside a claim or with its own lease", d.GetIndex())
			}
			out[i].Lease, out[i].Holder, out[i].Until, out[i].Granted = claim.Lease, claim.Holder, claim.Until, claim.Granted
		}
	}
	return out, nil
}

func toTasks(m map[string][]metadata.Delivery, skew time.Duration) map[string]*tqpb.Deliveries {
	out := make(map[string]*tqpb.Deliveries, len(m))
	for t, ds := range m {
		out[t] = &tqpb.Deliveries{Deliveries: toDeliveries(ds, skew)}
	}
	return out
}

func fromTasks(m map[string]*tqpb.Deliveries, skew time.Duration) (map[string][]metadata.Delivery, error) {
	out := make(map[string][]metadata.Delivery, len(m))
	for t, ds := range m {
		d, err := fromDeliveries(ds.GetDeliveries(), skew, nil)
		if err != nil {
			return nil, fmt.Errorf("task %q: %w", t, err)
		}
		out[t] = d
	}
	return out, nil
}

// Claims.

func toClaimRequest(partition string, r *metadata.ClaimRequest) *tqpb.ClaimRequest {
	out := &tqpb.ClaimRequest{
		Partition: partition, Task: r.Task, LeaseNs: int64(r.Lease), Rows: int64(r.Rows), Min: int64(r.Min),
		MaxDeliveries: int64(r.MaxDeliveries), Floor: r.Floor, Custom: r.Custom, HoldNs: int64(r.Hold),
		Holder: r.Holder, Replaces: r.Replaces, Token: r.Token,
		Select: &tqpb.Select{
			Fields: r.Select.Fields,
			Group: &tqpb.Group{Tag: r.Select.Group.Tag, Sep: r.Select.Group.Sep, Size: int64(r.Select.Group.Size),
				DeadlineNs: int64(r.Select.Group.Deadline), Partial: r.Select.Group.Partial},
			StaleTag: r.Select.Stale.Tag, StaleDrop: r.Select.Stale.Drop,
		},
	}
	if r.Batch != nil {
		out.Batch = &tqpb.Batch{Ranks: int64(r.Batch.Ranks), Rank: int64(r.Batch.Rank)}
	}
	return out
}

// fromClaimRequest converts a request off the wire; counts that do not fit
// an int are refused here (Check bounds the rest).
func fromClaimRequest(r *tqpb.ClaimRequest) (metadata.ClaimRequest, error) {
	ints := []int64{r.GetRows(), r.GetMin(), r.GetMaxDeliveries(), r.GetSelect().GetGroup().GetSize(), r.GetBatch().GetRanks(), r.GetBatch().GetRank()}
	for _, n := range ints {
		if n != int64(int32(n)) {
			return metadata.ClaimRequest{}, invalidf("claim: count %d out of range", n)
		}
	}
	g := r.GetSelect().GetGroup()
	out := metadata.ClaimRequest{
		Task: r.GetTask(), Lease: time.Duration(r.GetLeaseNs()), Rows: int(r.GetRows()), Min: int(r.GetMin()),
		MaxDeliveries: int(r.GetMaxDeliveries()), Floor: r.GetFloor(), Custom: r.GetCustom(),
		Hold: time.Duration(r.GetHoldNs()), Holder: r.GetHolder(), Replaces: r.GetReplaces(), Token: r.GetToken(),
		Select: metadata.Select{
			Fields: r.GetSelect().GetFields(),
			Group: metadata.Group{Tag: g.GetTag(), Sep: g.GetSep(), Size: int(g.GetSize()),
				Deadline: time.Duration(g.GetDeadlineNs()), Partial: g.GetPartial()},
			Stale: metadata.Stale{Tag: r.GetSelect().GetStaleTag(), Drop: r.GetSelect().GetStaleDrop()},
		},
	}
	if b := r.GetBatch(); b != nil {
		out.Batch = &metadata.Batch{Ranks: int(b.GetRanks()), Rank: int(b.GetRank())}
	}
	return out, nil
}

// unitsByRow reports whether units are each of n rows alone, in order.
func unitsByRow(units [][]int, n int) bool {
	if len(units) != n || n == 0 {
		return false
	}
	for i, u := range units {
		if len(u) != 1 || u[0] != i {
			return false
		}
	}
	return true
}

// toClaimed is c on the wire; with compact (ClaimRequest.compact), the
// rows and the deliveries of the lease say once what they share.
func toClaimed(c *metadata.Claimed, skew time.Duration, compact bool) (*tqpb.ClaimReply, error) {
	rows, err := toRowList(c.Rows, compact)
	if err != nil {
		return nil, err
	}
	var claim *metadata.Delivery
	if compact && c.Lease != "" {
		// The lease's holder and grant, as its first row's delivery says
		// them: the rows it leased share them.
		for i := range c.Deliveries {
			if d := &c.Deliveries[i]; d.Lease == c.Lease {
				claim = &metadata.Delivery{Lease: c.Lease, Holder: d.Holder, Until: c.Until, Granted: d.Granted}
				break
			}
		}
	}
	cleared, err := toRows(c.Cleared)
	if err != nil {
		return nil, err
	}
	byRow := compact && unitsByRow(c.Units, len(c.Rows))
	var units []*tqpb.Positions
	if !byRow {
		units = make([]*tqpb.Positions, len(c.Units))
		for i, u := range c.Units {
			p := make([]int64, len(u))
			for j, x := range u {
				p[j] = int64(x)
			}
			units[i] = &tqpb.Positions{Positions: p}
		}
	}
	out := &tqpb.ClaimReply{
		Lease: c.Lease, Rows: rows, Units: units,
		Until: toMoment(c.Until, skew), Dropped: int64(c.Dropped), Skipped: int64(c.Skipped),
		Cleared: cleared, Partial: c.Partial, HasPartial: c.Partial != nil, Waiting: c.Waiting,
		Mark: toMark(c.Mark, skew), UnitsByRow: byRow,
	}
	if claim != nil {
		out.Holder, out.Granted = claim.Holder, toMoment(claim.Granted, skew)
	}
	if counts, max, ok := deliveryCounts(c, claim); ok {
		out.DeliveryCounts, out.DeliveryMax = counts, max
	} else {
		out.Deliveries = toDeliveryList(c.Deliveries, skew, claim)
	}
	return out, nil
}

// claimOwns reports whether d has claim's lease, holder, until and
// granted: what a compact reply says once for them.
func claimOwns(claim, d *metadata.Delivery) bool {
	return d.Lease == claim.Lease && d.Holder == claim.Holder && d.Until.Equal(claim.Until) && d.Granted.Equal(claim.Granted)
}

// deliveryCounts is c's deliveries as ClaimReply.delivery_counts says
// them, when it can (ok): every row's is claim's own (claim not nil),
// leased, with no reason, and of one max.
func deliveryCounts(c *metadata.Claimed, claim *metadata.Delivery) (counts []int64, max int64, ok bool) {
	if claim == nil || len(c.Deliveries) == 0 || len(c.Deliveries) != len(c.Rows) {
		return nil, 0, false
	}
	max = int64(c.Deliveries[0].Max)
	counts = make([]int64, len(c.Deliveries))
	for i, d := range c.Deliveries {
		if d.Index != c.Rows[i].Index || d.State != metadata.Leased || !claimOwns(claim, &d) || d.Reason != "" || !d.At.IsZero() || int64(d.Max) != max {
			return nil, 0, false
		}
		counts[i] = int64(d.Deliveries)
	}
	return counts, max, true
}

func fromClaimed(r *tqpb.ClaimReply, skew time.Duration) (metadata.Claimed, error) {
	return fromClaimedWith(r, skew, nil)
}

// fromClaimedWith is fromClaimed, remembering the rows' fields in memo
// (see fieldMemo).
func fromClaimedWith(r *tqpb.ClaimReply, skew time.Duration, memo *fieldMemo) (metadata.Claimed, error) {
	rows, err := fromRowsWith(r.GetRows(), memo)
	if err != nil {
		return metadata.Claimed{}, err
	}
	cleared, err := fromRows(r.GetCleared())
	if err != nil {
		return metadata.Claimed{}, err
	}
	var units [][]int
	switch {
	case r.GetUnitsByRow():
		if len(r.GetUnits()) > 0 {
			return metadata.Claimed{}, fmt.Errorf("units, and each row a unit of its own")
		}
		flat := make([]int, len(rows))
		units = make([][]int, len(rows))
		for i := range flat {
			flat[i] = i
			units[i] = flat[i : i+1 : i+1]
		}
	case len(r.GetUnits()) > 0:
		units = make([][]int, len(r.GetUnits()))
	}
	for i, u := range r.GetUnits() {
		p := make([]int, len(u.GetPositions()))
		for j, x := range u.GetPositions() {
			if x < 0 || x >= int64(len(rows)) {
				return metadata.Claimed{}, fmt.Errorf("position %d of %d rows", x, len(rows))
			}
			p[j] = int(x)
		}
		units[i] = p
	}
	out := metadata.Claimed{
		Lease: r.GetLease(), Rows: rows, Units: units, Until: fromMoment(r.GetUntil(), skew),
		Dropped: int(r.GetDropped()), Skipped: int(r.GetSkipped()), Cleared: cleared,
		Waiting: r.GetWaiting(), Mark: fromMark(r.GetMark(), skew),
	}
	claim := &metadata.Delivery{Lease: out.Lease, Holder: r.GetHolder(), Until: out.Until, Granted: fromMoment(r.GetGranted(), skew)}
	if claim.Lease == "" {
		claim = nil
	}
	switch counts := r.GetDeliveryCounts(); {
	case len(counts) > 0:
		if claim == nil || len(r.GetDeliveries()) > 0 || len(counts) != len(rows) {
			return metadata.Claimed{}, fmt.Errorf("%d delivery counts for %d rows, with %d deliveries, leased to %q", len(counts), len(rows), len(r.GetDeliveries()), out.Lease)
		}
		out.Deliveries = make([]metadata.Delivery, len(counts))
		for i, n := range counts {
			d := *claim
			d.Index, d.State, d.Deliveries, d.Max = rows[i].Index, metadata.Leased, int(n), int(r.GetDeliveryMax())
			out.Deliveries[i] = d
		}
	case len(r.GetDeliveries()) > 0:
		if out.Deliveries, err = fromDeliveries(r.GetDeliveries(), skew, claim); err != nil {
			return metadata.Claimed{}, err
		}
	}
	if r.GetHasPartial() {
		out.Partial = r.GetPartial()
		if out.Partial == nil {
			out.Partial = []bool{}
		}
	}
	return out, nil
}

func toView(v *metadata.View, skew time.Duration) (*tqpb.ViewReply, error) {
	rows, err := toRows(v.Rows)
	if err != nil {
		return nil, err
	}
	out := &tqpb.ViewReply{
		Rows: rows, Tasks: toTasks(v.Tasks, skew), Mark: toMark(v.Mark, skew),
		Capacity: toCapacity(v.Capacity), Used: toUsage(v.Used), Inserted: v.Inserted, Consumed: v.Consumed,
	}
	if v.Since != nil {
		out.Since = make([]*tqpb.Moment, len(v.Since))
		for i, t := range v.Since {
			out.Since[i] = toMoment(t, skew)
			if out.Since[i] == nil {
				out.Since[i] = &tqpb.Moment{UnixNs: zeroMoment}
			}
		}
	}
	if v.Groups != nil {
		out.Groups = make(map[string]*tqpb.GroupWaits, len(v.Groups))
		for t, gs := range v.Groups {
			out.Groups[t] = toGroupWaits(gs, skew)
		}
	}
	return out, nil
}

// toGroupWaits is nil for nil gs.
func toGroupWaits(gs []metadata.GroupWait, skew time.Duration) *tqpb.GroupWaits {
	if gs == nil {
		return nil
	}
	pg := make([]*tqpb.GroupWait, len(gs))
	for i, g := range gs {
		pg[i] = &tqpb.GroupWait{Id: g.ID, Rows: int64(g.Rows), Since: toMoment(g.Since, skew), Overdue: g.Overdue}
	}
	return &tqpb.GroupWaits{Groups: pg}
}

// fromGroupWaits is nil for an absent gs.
func fromGroupWaits(gs *tqpb.GroupWaits, skew time.Duration) []metadata.GroupWait {
	if gs == nil {
		return nil
	}
	mg := make([]metadata.GroupWait, len(gs.GetGroups()))
	for i, g := range gs.GetGroups() {
		mg[i] = metadata.GroupWait{ID: g.GetId(), Rows: int(g.GetRows()), Since: fromMoment(g.GetSince(), skew), Overdue: g.GetOverdue()}
	}
	return mg
}

// zeroMoment stands for a zero time inside a list whose entries must all
// be present (View.Since).
const zeroMoment = -1 << 63

func fromView(r *tqpb.ViewReply, skew time.Duration) (metadata.View, error) {
	rows, err := fromRows(r.GetRows())
	if err != nil {
		return metadata.View{}, err
	}
	if rows == nil {
		rows = []*metadata.Row{}
	}
	tasks, err := fromTasks(r.GetTasks(), skew)
	if err != nil {
		return metadata.View{}, err
	}
	out := metadata.View{
		Rows: rows, Tasks: tasks, Mark: fromMark(r.GetMark(), skew),
		Capacity: fromCapacity(r.GetCapacity()), Used: fromUsage(r.GetUsed()), Inserted: r.GetInserted(),
		Consumed: r.GetConsumed(),
	}
	if out.Consumed == nil {
		out.Consumed = map[string]uint64{}
	}
	if len(r.GetSince()) > 0 {
		out.Since = make([]time.Time, len(r.GetSince()))
		for i, m := range r.GetSince() {
			if m.GetUnixNs() != zeroMoment {
				out.Since[i] = fromMoment(m, skew)
			}
		}
	}
	if r.GetGroups() != nil {
		out.Groups = make(map[string][]metadata.GroupWait, len(r.GetGroups()))
		for t, gs := range r.GetGroups() {
			out.Groups[t] = fromGroupWaits(gs, skew)
			if out.Groups[t] == nil {
				out.Groups[t] = []metadata.GroupWait{}
			}
		}
	}
	return out, nil
}

func toSummaryRequest(partition string, r *metadata.SummaryRequest) *tqpb.SummaryRequest {
	return &tqpb.SummaryRequest{Partition: partition, Tasks: r.Tasks, Fields: r.Fields, Counts: r.Counts,
		Version: r.Version, Progress: r.Progress}
}

func fromSummaryRequest(r *tqpb.SummaryRequest) metadata.SummaryRequest {
	return metadata.SummaryRequest{Tasks: r.GetTasks(), Fields: r.GetFields(), Counts: r.GetCounts(),
		Version: r.GetVersion(), Progress: r.GetProgress()}
}

func toSummary(s *metadata.Summary, skew time.Duration) *tqpb.SummaryReply {
	out := &tqpb.SummaryReply{
		Rows: int64(s.Rows), OldestRow: toMoment(s.OldestRow, skew), Capacity: toCapacity(s.Capacity),
		Used: toUsage(s.Used), Inserted: s.Inserted, Mark: toMark(s.Mark, skew), Oldest: s.Oldest,
	}
	if len(s.Fields) > 0 {
		out.Fields = make(map[string]int64, len(s.Fields))
		for f, n := range s.Fields {
			out.Fields[f] = int64(n)
		}
	}
	if len(s.Tasks) > 0 {
		out.Tasks = make(map[string]*tqpb.TaskSummary, len(s.Tasks))
	}
	for t, ts := range s.Tasks {
		pt := &tqpb.TaskSummary{
			Ready: int64(ts.Ready), Waiting: int64(ts.Waiting), Leased: int64(ts.Leased), Acked: int64(ts.Acked),
			Dead: int64(ts.Dead), Dropped: int64(ts.Dropped), Redelivered: int64(ts.Redelivered),
			OldestReady: toMoment(ts.OldestReady, skew), Consumed: ts.Consumed, Groups: toGroupWaits(ts.Groups, skew),
			Progress: ts.Progress, DeadLeaseEnded: int64(ts.DeadLeaseEnded),
		}
		if d := ts.LastDead; d != nil {
			pt.LastDead = &tqpb.DeadSummary{Key: d.Key, Index: d.Index, Deliveries: int64(d.Deliveries), Reason: d.Reason, At: toMoment(d.At, skew)}
		}
		for _, l := range ts.Leases {
			pt.Leases = append(pt.Leases, &tqpb.LeaseSummary{Holder: l.Holder, Rows: int64(l.Rows),
				Until: toMoment(l.Until, skew), Granted: toMoment(l.Granted, skew), Deliveries: int64(l.Deliveries), Id: l.ID})
		}
		if len(ts.Missing) > 0 {
			pt.Missing = make(map[string]int64, len(ts.Missing))
			for f, n := range ts.Missing {
				pt.Missing[f] = int64(n)
			}
		}
		out.Tasks[t] = pt
	}
	return out
}

// fromSummary is the reply to req, its maps made as View.Summary makes
// them (the wire does not tell an empty map from none).
func fromSummary(r *tqpb.SummaryReply, req *metadata.SummaryRequest, skew time.Duration) (metadata.Summary, error) {
	count := func(what string, n int64) (int, error) {
		if n < 0 || n > maxCount {
			return 0, fmt.Errorf("%s %d", what, n)
		}
		return int(n), nil
	}
	rows, err := count("rows", r.GetRows())
	if err != nil {
		return metadata.Summary{}, err
	}
	out := metadata.Summary{
		Rows: rows, Fields: make(map[string]int, len(r.GetFields())), OldestRow: fromMoment(r.GetOldestRow(), skew),
		Tasks: make(map[string]metadata.TaskSummary, len(r.GetTasks())), Capacity: fromCapacity(r.GetCapacity()),
		Used: fromUsage(r.GetUsed()), Inserted: r.GetInserted(), Mark: fromMark(r.GetMark(), skew), Oldest: r.GetOldest(),
	}
	for f, n := range r.GetFields() {
		if out.Fields[f], err = count("rows of field "+f, n); err != nil {
			return metadata.Summary{}, err
		}
	}
	for t, pt := range r.GetTasks() {
		ts := metadata.TaskSummary{OldestReady: fromMoment(pt.GetOldestReady(), skew), Consumed: pt.GetConsumed(),
			Groups: fromGroupWaits(pt.GetGroups(), skew), Progress: pt.GetProgress()}
		for _, c := range []struct {
			to *int
			n  int64
		}{{&ts.Ready, pt.GetReady()}, {&ts.Waiting, pt.GetWaiting()}, {&ts.Leased, pt.GetLeased()}, {&ts.Acked, pt.GetAcked()},
			{&ts.Dead, pt.GetDead()}, {&ts.Dropped, pt.GetDropped()}, {&ts.Redelivered, pt.GetRedelivered()},
			{&ts.DeadLeaseEnded, pt.GetDeadLeaseEnded()}} {
			if *c.to, err = count("task "+t+" rows", c.n); err != nil {
				return metadata.Summary{}, err
			}
		}
		if d := pt.GetLastDead(); d != nil {
			n, err := count("dead row deliveries", d.GetDeliveries())
			if err != nil {
				return metadata.Summary{}, err
			}
			ts.LastDead = &metadata.DeadSummary{Key: d.GetKey(), Index: d.GetIndex(), Deliveries: n, Reason: d.GetReason(), At: fromMoment(d.GetAt(), skew)}
		}
		for _, l := range pt.GetLeases() {
			n, err := count("lease rows", l.GetRows())
			if err != nil {
				return metadata.Summary{}, err
			}
			d, err := count("lease deliveries", l.GetDeliveries())
			if err != nil {
				return metadata.Summary{}, err
			}
			ts.Leases = append(ts.Leases, metadata.LeaseSummary{Holder: l.GetHolder(), Rows: n,
				Until: fromMoment(l.GetUntil(), skew), Granted: fromMoment(l.GetGranted(), skew), Deliveries: d, ID: l.GetId()})
		}
		if req.Progress {
			ts.Missing = make(map[string]int, len(pt.GetMissing()))
			for f, n := range pt.GetMissing() {
				if ts.Missing[f], err = count("rows missing "+f, n); err != nil {
					return metadata.Summary{}, err
				}
			}
		}
		out.Tasks[t] = ts
	}
	return out, nil
}

// maxCount bounds a count of rows a reply may carry: well within an int
// of any platform.
const maxCount = 1<<31 - 1
