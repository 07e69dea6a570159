package tq_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/codec"
	"github.com/tqgo/tqgo/tq"
)

// errInjected is the error the spy's faults return.
var errInjected = errors.New("test: injected fault")

// call is one backend call the spy saw.
type call struct {
	op   string // "put" (Store.Write), "get" (Store.Read), "delete", "allocate" (Stager.Stage)
	keys []string
}

// hookFunc decides the fate of the n-th (1-based) call of op: how many of
// its keys reach the store (a prefix), and the error the call returns.
type hookFunc func(ctx context.Context, op string, n int, keys []string) (allow int, err error)

// spy wraps a memory store as a backends.Store: it records every call and
// its keys, and lets a hook fail calls, write only part of a Write, or
// cancel a context. A Write is the op "put" (it publishes staged cells
// too), a Read "get", a Delete "delete". As newSpy(..).backend(true) it
// also passes the store's Stager through (Stage is the op "allocate"), so
// the client encodes its packed cells into the store's memory.
type spy struct {
	inner *memory.Store
	hook  hookFunc // set before use, read-only afterwards

	mu      sync.Mutex // guards calls, counts and written
	calls   []call
	counts  map[string]int
	written map[string]struct{} // every key ever written, to list the live ones
}

func newSpy(hook hookFunc) *spy {
	return &spy{inner: memory.New(), hook: hook, counts: map[string]int{}, written: map[string]struct{}{}}
}

// allocSpy is a spy that is also a backends.Stager.
type allocSpy struct{ *spy }

var (
	_ backends.Store  = (*spy)(nil)
	_ backends.Stager = allocSpy{}
)

// backend returns the spy as a plain Store, or as a Stager too.
func (s *spy) backend(alloc bool) backends.Store {
	if alloc {
		return allocSpy{s}
	}
	return s
}

// enter records a call and returns how many keys may pass and its error.
func (s *spy) enter(ctx context.Context, op string, keys []string) (int, error) {
	s.mu.Lock()
	s.counts[op]++
	n := s.counts[op]
	s.calls = append(s.calls, call{op: op, keys: slices.Clone(keys)})
	s.mu.Unlock()
	if s.hook == nil {
		return len(keys), nil
	}
	return s.hook(ctx, op, n, keys)
}

func (s *spy) noteWritten(keys []string) {
	s.mu.Lock()
	for _, k := range keys {
		s.written[k] = struct{}{}
	}
	s.mu.Unlock()
}

func cellKeys(cells []backends.Cell) []string {
	keys := make([]string, len(cells))
	for i := range cells {
		keys[i] = cells[i].Key
	}
	return keys
}

func (s *spy) Write(ctx context.Context, cells []backends.Cell) error {
	keys := cellKeys(cells)
	allow, err := s.enter(ctx, "put", keys)
	s.noteWritten(keys[:allow])
	if werr := s.inner.Write(ctx, cells[:allow]); werr != nil {
		return werr
	}
	return err
}

func (s *spy) Read(ctx context.Context, cells []backends.ReadCell) error {
	keys := make([]string, len(cells))
	for i := range cells {
		keys[i] = cells[i].Key
	}
	if _, err := s.enter(ctx, "get", keys); err != nil {
		return err
	}
	return s.inner.Read(ctx, cells)
}

func (s *spy) Delete(ctx context.Context, cells []backends.Cell) error {
	allow, err := s.enter(ctx, "delete", cellKeys(cells))
	if derr := s.inner.Delete(ctx, cells[:allow]); derr != nil {
		return derr
	}
	return err
}

func (s *spy) Close() error { return nil }

func (a allocSpy) Stage(ctx context.Context, cells []backends.Cell, sizes []int) error {
	if _, err := a.enter(ctx, "allocate", cellKeys(cells)); err != nil {
		return err
	}
	return a.inner.Stage(ctx, cells, sizes)
}

func (a allocSpy) Unstage(cells []backends.Cell) {
	a.mu.Lock()
	a.counts["unstage"]++
	a.mu.Unlock()
	a.inner.Unstage(cells)
}

// count returns how many calls of op the spy saw.
func (s *spy) count(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[op]
}

// callsOf returns the calls of op, in the order they were made.
func (s *spy) callsOf(op string) []call {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []call
	for _, c := range s.calls {
		if c.op == op {
			out = append(out, c)
		}
	}
	return out
}

// totalCalls is the number of calls of any kind.
func (s *spy) totalCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

// resetCalls forgets the calls seen so far (not the written keys).
func (s *spy) resetCalls() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls, s.counts = nil, map[string]int{}
}

// live returns the storage keys the store holds now, sorted.
func (s *spy) live(t testing.TB) []string {
	t.Helper()
	s.mu.Lock()
	keys := make([]string, 0, len(s.written))
	for k := range s.written {
		keys = append(keys, k)
	}
	s.mu.Unlock()
	cells := make([]backends.ReadCell, len(keys))
	for i, k := range keys {
		cells[i].Key = k
	}
	if err := s.inner.Read(context.Background(), cells); err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := range cells {
		if cells[i].Found {
			out = append(out, keys[i])
		}
	}
	if len(out) != s.inner.Len() {
		t.Fatalf("store holds %d keys, spy saw only %d of them written", s.inner.Len(), len(out))
	}
	slices.Sort(out)
	return out
}

// metaSpy wraps a MetaStore, counts the calls that change state, and can
// fail Prepare or Commit or run a function before Commit.
type metaSpy struct {
	metadata.MetaStore
	prepareErr   error  // set before use
	commitErr    error  // set before use
	appliedErr   error  // set before use: Commit applies, then reports this
	beforeCommit func() // set before use

	prepares, commits atomic.Int64
}

func newMetaSpy() *metaSpy { return &metaSpy{MetaStore: memory.NewMetaStore()} }

func (m *metaSpy) Prepare(ctx context.Context, partition string, keys, fields []string, sizes []int64) ([]metadata.Reservation, error) {
	m.prepares.Add(1)
	if m.prepareErr != nil {
		return nil, m.prepareErr
	}
	return m.MetaStore.Prepare(ctx, partition, keys, fields, sizes)
}

func (m *metaSpy) Commit(ctx context.Context, partition string, updates []metadata.RowUpdate) (metadata.CommitResult, error) {
	m.commits.Add(1)
	if m.beforeCommit != nil {
		m.beforeCommit()
	}
	if m.commitErr != nil {
		return metadata.CommitResult{}, m.commitErr
	}
	res, err := m.MetaStore.Commit(ctx, partition, updates)
	if err == nil && m.appliedErr != nil {
		return res, m.appliedErr // the reply was lost after the store applied it
	}
	return res, err
}

// newClient is tq.New over data and meta (a Local engine when meta is nil)
// with the client closed at cleanup.
func newClient(t testing.TB, data backends.Store, meta metadata.MetaStore, opts ...tq.Option) *tq.Client {
	t.Helper()
	c, err := tq.New(backends.Engine{Data: data, Meta: meta, Local: meta == nil}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// memClient is a client over a fresh memory store, returned with it.
func memClient(t testing.TB, opts ...tq.Option) (*tq.Client, *memory.Store) {
	t.Helper()
	st := memory.New()
	return newClient(t, st, nil, opts...), st
}

// keysN returns n keys prefix0 .. prefix<n-1>.
func keysN(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// seq returns n elements from, from+1, ...
func seq[T int64 | int32 | float32 | float64](from T, n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = from + T(i)
	}
	return out
}

// mustPut is BatchPut that fails the test on error.
func mustPut(t testing.TB, c *tq.Client, partition string, keys []string, b tq.Batch, tags []tq.Tag) {
	t.Helper()
	if err := c.BatchPut(context.Background(), partition, keys, b, tags); err != nil {
		t.Fatalf("BatchPut %s %v: %v", partition, keys, err)
	}
}

// mustGet is BatchGet that fails the test on error.
func mustGet(t testing.TB, c *tq.Client, partition string, keys []string, fields ...string) tq.Batch {
	t.Helper()
	b, err := c.BatchGet(context.Background(), partition, keys, fields...)
	if err != nil {
		t.Fatalf("BatchGet %s %v %v: %v", partition, keys, fields, err)
	}
	return b
}

// rowsOf returns every row of a tensor column as []T.
func rowsOf[T int64 | int32 | float32 | float64 | bool](t testing.TB, col tq.Column) [][]T {
	t.Helper()
	rows, err := tq.RowsAs[T](col)
	if err != nil {
		t.Fatalf("RowsAs: %v (kind %v)", err, col.Kind())
	}
	return rows
}

// stackedOf is col's stacked tensor; another kind of column fails t.
func stackedOf(t testing.TB, col tq.Column) codec.Tensor {
	t.Helper()
	x, ok := col.Tensor()
	if !ok {
		t.Fatalf("column kind %v, want stacked", col.Kind())
	}
	return x
}

// flat returns a tensor column's elements as one []T.
func flat[T int64 | int32 | float32 | float64 | bool](t testing.TB, col tq.Column) []T {
	t.Helper()
	v, err := tq.As[T](col)
	if err != nil {
		t.Fatalf("As: %v (kind %v)", err, col.Kind())
	}
	return v
}

// indexOf returns the global index in a storage key "<index>@<field>[#gen]".
func indexOf(skey string) string {
	i, _, _ := strings.Cut(skey, "@")
	return i
}

// intShape is a codec shape as tq's constructors take it.
func intShape(s []int64) []int {
	out := make([]int, len(s))
	for i, d := range s {
		out[i] = int(d)
	}
	return out
}

// engClient is tq.New over eng with the client closed at cleanup.
func engClient(t testing.TB, eng backends.Engine, opts ...tq.Option) *tq.Client {
	t.Helper()
	c, err := tq.New(eng, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// local is a Local engine over data (an in-process metadata store).
func local(data backends.Store) backends.Engine {
	return backends.Engine{Data: data, Local: true}
}

// putRaw writes values under keys as they are, past the client.
func putRaw(ctx context.Context, st backends.Store, keys []string, values [][]byte) error {
	cells := make([]backends.Cell, len(keys))
	for i, k := range keys {
		cells[i] = backends.Cell{Key: k, Body: values[i]}
	}
	return st.Write(ctx, cells)
}

// getRaw reads keys whole (nil for a missing one), past the client.
func getRaw(ctx context.Context, st backends.Store, keys []string) ([][]byte, error) {
	cells := make([]backends.ReadCell, len(keys))
	for i, k := range keys {
		cells[i].Key = k
	}
	if err := st.Read(ctx, cells); err != nil {
		return nil, err
	}
	out := make([][]byte, len(keys))
	for i := range cells {
		if cells[i].Found {
			out[i] = cells[i].Value
			if out[i] == nil {
				out[i] = []byte{}
			}
		}
	}
	return out, nil
}

// delRaw deletes keys (untagged cells), past the client.
func delRaw(ctx context.Context, st backends.Store, keys []string) error {
	cells := make([]backends.Cell, len(keys))
	for i, k := range keys {
		cells[i].Key = k
	}
	return st.Delete(ctx, cells)
}

// wholeReader is a store whose Read answers the cells pick chooses whole,
// in Value, leaving their destinations alone (as an engine does for a
// value of another length), counting calls.
type wholeReader struct {
	backends.Store
	calls *atomic.Int32
	pick  func(call, i int) bool
}

func (s wholeReader) Read(ctx context.Context, cells []backends.ReadCell) error {
	call := int(s.calls.Add(1))
	type dst struct {
		i          int
		head, body []byte
	}
	var whole []dst
	for i := range cells {
		if s.pick(call, i) {
			whole = append(whole, dst{i, cells[i].Head, cells[i].Body})
			cells[i].Head, cells[i].Body = nil, nil // no destination: read whole
		}
	}
	err := s.Store.Read(ctx, cells)
	for _, d := range whole {
		cells[d.i].Head, cells[d.i].Body = d.head, d.body
	}
	return err
}
