package redis_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// lostClient opens a tq client under prefix on srv whose data backend is
// wrap of the engine's, with a rewinder of partition p, and writes row a.
func lostClient(t *testing.T, srv interface {
	URL() string
	Addr() string
}, prefix string, wrap func(backends.Store, *rewinder) backends.Store) (*tq.Client, *rewinder) {
	t.Helper()
	s := open(t, srv.URL()+"?prefix="+prefix)
	r := &rewinder{cl: goredis.NewClient(&goredis.Options{Addr: srv.Addr()}), base: prefix + ":{" + prefix + ":p}"}
	t.Cleanup(func() { r.cl.Close() })
	c, err := tq.New(apart(wrap(s, r), s.Log()), tq.WithRetry(tq.NoRetry))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.BatchPut(t.Context(), "p", []string{"a"}, tq.Batch{"x": tq.ValuesOf([]string{"first"})}, nil); err != nil {
		t.Fatal(err)
	}
	return c, r
}

// cellCount counts the data cells under prefix (put markers aside).
func cellCount(t *testing.T, r *rewinder, prefix string) int {
	t.Helper()
	keys, err := r.cl.Keys(t.Context(), prefix+":d:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, k := range keys {
		if !strings.Contains(k, "!") {
			n++
		}
	}
	return n
}

// rewinder saves a partition's metadata keys (DUMP) and puts them back
// (RESTORE): the state of a replica that missed everything since the save.
type rewinder struct {
	cl    *goredis.Client
	base  string
	saved map[string]string
}

func (r *rewinder) save(t *testing.T) {
	t.Helper()
	r.saved = map[string]string{}
	for _, k := range []string{"log", "snap"} {
		v, err := r.cl.Dump(t.Context(), r.base+":"+k).Result()
		if errors.Is(err, goredis.Nil) {
			v, err = "", nil // absent: back deletes it
		}
		if err != nil {
			t.Fatalf("DUMP %s: %v", k, err)
		}
		r.saved[k] = v
	}
}

func (r *rewinder) back(ctx context.Context) error {
	for k, v := range r.saved {
		var err error
		if v == "" {
			err = r.cl.Del(ctx, r.base+":"+k).Err()
		} else {
			err = r.cl.RestoreReplace(ctx, r.base+":"+k, 0, v).Err()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// TestCommitOfLostReservation: a Prepare the log no longer has (it was
// rewound to before it, as a promoted replica that missed it would be)
// makes the Commit fail with backends.ErrReservationLost, which matches
// ErrConflict too: the store does not know the reservation, so its index
// may be another row's now.
func TestCommitOfLostReservation(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	m := metaOf(open(t, srv.URL()+"?prefix=lost"))
	commitOne(t, m, "p", "a")
	r := &rewinder{cl: goredis.NewClient(&goredis.Options{Addr: srv.Addr()}), base: "lost:{lost:p}"}
	defer r.cl.Close()
	r.save(t)
	res, err := m.Prepare(ctx, "p", []string{"k"}, []string{"f"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.back(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = m.Commit(ctx, "p", fieldUpdate([]string{"k"}, res, "f"))
	if !errors.Is(err, backends.ErrReservationLost) || !errors.Is(err, backends.ErrConflict) {
		t.Fatalf("Commit of a reservation the log lost: %v, want ErrReservationLost (and ErrConflict)", err)
	}
	// A reservation of a row the log removed is an ordinary conflict.
	res, err = m.Prepare(ctx, "p", []string{"a"}, []string{"f"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Delete(ctx, "p", []string{"a"}); err != nil {
		t.Fatal(err)
	}
	_, err = m.Commit(ctx, "p", fieldUpdate([]string{"a"}, res, "f"))
	if !errors.Is(err, backends.ErrConflict) || errors.Is(err, backends.ErrReservationLost) {
		t.Fatalf("Commit of a removed row's reservation: %v, want ErrConflict, not ErrReservationLost", err)
	}
}

// rewindAfterPut rewinds the metadata once the put's cells are written,
// between its data and its commit.
type rewindAfterPut struct {
	backends.Store
	r    *rewinder
	once sync.Once
	err  error
}

func (w *rewindAfterPut) Write(ctx context.Context, cells []backends.Cell) error {
	err := w.Store.Write(ctx, cells)
	if err == nil {
		w.once.Do(func() { w.err = w.r.back(ctx) })
	}
	return err
}

// TestPutOfLostReservationKeepsCells: a put whose reservation the log lost
// between its cells and its commit fails, and does not delete its cells
// by storage key, since the index they name may be another row's.
func TestPutOfLostReservationKeepsCells(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	var w *rewindAfterPut
	c, r := lostClient(t, srv, "lostput", func(b backends.Store, r *rewinder) backends.Store {
		w = &rewindAfterPut{Store: b, r: r}
		return w
	})
	r.save(t)
	w.once = sync.Once{}
	keys := keyRange("k", 4)
	err := c.BatchPut(ctx, "p", keys, tq.Batch{"x": tq.ValuesOf([]string{"0", "1", "2", "3"})}, nil)
	if w.err != nil {
		t.Fatal(w.err)
	}
	if !errors.Is(err, backends.ErrReservationLost) {
		t.Fatalf("put whose reservation the log lost: %v, want ErrReservationLost", err)
	}
	n := cellCount(t, r, "lostput")
	if n != 1+len(keys) {
		t.Errorf("%d cells after the put, want %d: a put whose reservation was lost must not delete cells by storage key", n, 1+len(keys))
	}
	m, err := c.List(ctx, "p")
	if err != nil || len(m.Rows) != 1 || m.Rows[0].Key != "a" {
		t.Fatalf("List: %v, %v; want row a only", m, err)
	}
}

// rewindThenFail rewinds the metadata on the put's first data write and
// fails the write after it went through, as a failover under a put would.
type rewindThenFail struct {
	backends.Store
	r     *rewinder
	armed bool
}

var errFailedOver = errors.New("the server failed over under the write")

func (w *rewindThenFail) Write(ctx context.Context, cells []backends.Cell) error {
	if err := w.Store.Write(ctx, cells); err != nil || !w.armed {
		return err
	}
	w.armed = false
	if err := w.r.back(ctx); err != nil {
		return err
	}
	return errFailedOver
}

// TestRollbackOfLostReservationKeepsCells: a put whose data write fails
// after the log lost its reservation rolls back without deleting its
// cells by storage key (the store no longer confirms they are its own),
// while a put whose reservation the log has rolls back as ever.
func TestRollbackOfLostReservationKeepsCells(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	var w *rewindThenFail
	c, r := lostClient(t, srv, "lostrb", func(b backends.Store, r *rewinder) backends.Store {
		w = &rewindThenFail{Store: b, r: r}
		return w
	})
	count := func() int { return cellCount(t, r, "lostrb") }
	// A failure with the reservation known: the rollback deletes.
	w.armed, r.saved = true, map[string]string{} // a rewind that restores nothing
	keys := keyRange("k", 3)
	if err := c.BatchPut(ctx, "p", keys, tq.Batch{"x": tq.ValuesOf([]string{"0", "1", "2"})}, nil); !errors.Is(err, errFailedOver) {
		t.Fatalf("put whose write failed: %v", err)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d cells after a rollback of a known reservation, want 1 (row a's)", n)
	}
	// The same failure after the log lost the reservation: nothing deleted.
	r.save(t)
	w.armed = true
	if err := c.BatchPut(ctx, "p", keys, tq.Batch{"x": tq.ValuesOf([]string{"0", "1", "2"})}, nil); !errors.Is(err, errFailedOver) {
		t.Fatalf("put whose write failed: %v", err)
	}
	if n := count(); n != 1+len(keys) {
		t.Errorf("%d cells after a rollback of a lost reservation, want %d: its cells must not be deleted by storage key", n, 1+len(keys))
	}
	m, err := c.List(ctx, "p")
	if err != nil || len(m.Rows) != 1 || m.Rows[0].Key != "a" {
		t.Fatalf("List: %v, %v; want row a only", m, err)
	}
}
