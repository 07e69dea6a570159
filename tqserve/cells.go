package tqserve

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/tqserve/tqpb"
)

// cellServer carries cells for clients that cannot reach the engine's
// data themselves (file://, memory://).
type cellServer struct {
	tqpb.UnimplementedCellsServer
	data backends.Store
}

func (s *cellServer) Write(ctx context.Context, r *tqpb.WriteCellsRequest) (*tqpb.WriteCellsReply, error) {
	cells := make([]backends.Cell, len(r.GetCells()))
	for i, c := range r.GetCells() {
		cells[i] = backends.Cell{Key: c.GetKey(), Body: c.GetValue()}
	}
	if err := s.data.Write(ctx, cells); err != nil {
		return nil, toStatus(err)
	}
	tags := make([]string, len(cells))
	for i, c := range cells {
		tags[i] = c.Tag
	}
	return &tqpb.WriteCellsReply{Tags: tags}, nil
}

func (s *cellServer) Read(ctx context.Context, r *tqpb.ReadCellsRequest) (*tqpb.ReadCellsReply, error) {
	cells := make([]backends.ReadCell, len(r.GetCells()))
	for i, c := range r.GetCells() {
		cells[i] = backends.ReadCell{Key: c.GetKey(), Tag: c.GetTag()}
	}
	if err := s.data.Read(ctx, cells); err != nil {
		return nil, toStatus(err)
	}
	out := make([]*tqpb.ReadCell, len(cells))
	for i, c := range cells {
		v := c.Value
		if c.Found && v == nil {
			v = slices.Concat(c.Head, c.Body)
		}
		out[i] = &tqpb.ReadCell{Found: c.Found, Value: v}
	}
	return &tqpb.ReadCellsReply{Cells: out}, nil
}

func (s *cellServer) Delete(ctx context.Context, r *tqpb.DeleteCellsRequest) (*tqpb.Empty, error) {
	cells := make([]backends.Cell, len(r.GetCells()))
	for i, c := range r.GetCells() {
		cells[i] = backends.Cell{Key: c.GetKey(), Tag: c.GetTag()}
	}
	return &tqpb.Empty{}, toStatus(s.data.Delete(ctx, cells))
}

// remoteCells is the Store of a client whose server carries its cells,
// over the connection of the client's Meta: once it is closed, or that
// Meta is, its calls return backends.ErrClosed.
type remoteCells struct {
	c      tqpb.CellsClient
	closed func() bool // whether the Meta, and with it the connection, is closed
	close  func() error
	done   atomic.Bool // Close was called
}

// check is the error of a call op on the store closed, or nil.
func (s *remoteCells) check(op string) error {
	if s.done.Load() || (s.closed != nil && s.closed()) {
		return fmt.Errorf("tq server: %s: %w", op, backends.ErrClosed)
	}
	return nil
}

// fail is the error of call op that failed with err: ErrClosed if the
// store or its Meta was closed meanwhile, else err's, classed as a read's.
func (s *remoteCells) fail(ctx context.Context, op string, err error) error {
	if cerr := s.check(op); cerr != nil {
		return cerr
	}
	return fromStatus(ctx, op, read, 0, err)
}

// writeRequestBytes bounds the cell bytes of one Write request: the
// cells of a put go in requests of about this much (a larger cell alone),
// well under a server's limit on a request (WithMaxMessage, 64 MiB by
// default), which one chunk of a large put's cells would pass.
const writeRequestBytes = 16 << 20

func (s *remoteCells) Write(ctx context.Context, cells []backends.Cell) error {
	if err := s.check("write cells"); err != nil {
		return err
	}
	for len(cells) > 0 {
		n, size := 0, 0
		for n < len(cells) && (n == 0 || size+len(cells[n].Key)+len(cells[n].Head)+len(cells[n].Body) <= writeRequestBytes) {
			size += len(cells[n].Key) + len(cells[n].Head) + len(cells[n].Body)
			n++
		}
		if err := s.write(ctx, cells[:n]); err != nil {
			return err
		}
		cells = cells[n:]
	}
	return nil
}

// write writes cells in one request.
func (s *remoteCells) write(ctx context.Context, cells []backends.Cell) error {
	req := &tqpb.WriteCellsRequest{Cells: make([]*tqpb.Cell, len(cells))}
	for i, c := range cells {
		v := c.Body
		if len(c.Head) > 0 {
			v = slices.Concat(c.Head, c.Body)
		}
		req.Cells[i] = &tqpb.Cell{Key: c.Key, Value: v}
	}
	r, err := s.c.Write(ctx, req)
	if err != nil {
		// Classed as a read's: a failed Write may have written some
		// cells, which its caller deletes (the Store contract), and
		// writing them again is harmless, so a lost reply is
		// ErrUnavailable alone (as Redis's store has it), which tq
		// retries.
		return s.fail(ctx, "write cells", err)
	}
	if len(r.GetTags()) != len(cells) {
		return malformed("write cells", read, fmt.Errorf("%d tags for %d cells", len(r.GetTags()), len(cells)))
	}
	for i := range cells {
		cells[i].Tag = r.GetTags()[i]
	}
	return nil
}

func (s *remoteCells) Read(ctx context.Context, cells []backends.ReadCell) error {
	if err := s.check("read cells"); err != nil {
		return err
	}
	if len(cells) == 0 {
		return nil
	}
	req := &tqpb.ReadCellsRequest{Cells: make([]*tqpb.Cell, len(cells))}
	for i, c := range cells {
		req.Cells[i] = &tqpb.Cell{Key: c.Key, Tag: c.Tag}
	}
	r, err := s.c.Read(ctx, req)
	if err != nil {
		return s.fail(ctx, "read cells", err)
	}
	if len(r.GetCells()) != len(cells) {
		return malformed("read cells", read, fmt.Errorf("%d cells for %d asked", len(r.GetCells()), len(cells)))
	}
	for i, rc := range r.GetCells() {
		c := &cells[i]
		c.Found = rc.GetFound()
		c.Value = nil
		if !c.Found {
			continue
		}
		v := rc.GetValue()
		if len(v) == len(c.Head)+len(c.Body) && len(v) > 0 {
			n := copy(c.Head, v)
			copy(c.Body, v[n:])
			continue
		}
		if v == nil {
			v = []byte{}
		}
		c.Value = v
	}
	return nil
}

func (s *remoteCells) Delete(ctx context.Context, cells []backends.Cell) error {
	if err := s.check("delete cells"); err != nil {
		return err
	}
	if len(cells) == 0 {
		return nil
	}
	req := &tqpb.DeleteCellsRequest{Cells: make([]*tqpb.Cell, len(cells))}
	for i, c := range cells {
		req.Cells[i] = &tqpb.Cell{Key: c.Key, Tag: c.Tag}
	}
	if _, err := s.c.Delete(ctx, req); err != nil {
		return s.fail(ctx, "delete cells", err) // as Write's: deleting again is harmless
	}
	return nil
}

// Close closes the store (the connection is its Meta's to close).
func (s *remoteCells) Close() error {
	s.done.Store(true)
	return s.close()
}
