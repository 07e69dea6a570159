package tq_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/tqgo/tqgo/tq"
)

func ExampleOpen() {
	ctx := context.Background()
	// "memory://" (or "") is the embedded engine; other schemes need their
	// engine's package imported for its side effect.
	c, err := tq.Open(ctx, "memory://", tq.WithKeysLimit(10_000))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	err = c.Put(ctx, "train", "sample-0", map[string]any{"prompt": "2+2=?"}, tq.Tag{"step": int64(0)})
	if err != nil {
		log.Fatal(err)
	}
	parts, err := c.Partitions(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(parts)

	_, err = tq.Open(ctx, "nosuch://host")
	fmt.Println(err != nil)
	// Output:
	// [train]
	// true
}

func ExampleClient_BatchPut() {
	ctx := context.Background()
	c, err := tq.Open(ctx, "")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// The rollout writes prompts (stacked: one [2, 3] tensor), responses
	// of different lengths (jagged) and a string per sample.
	keys := []string{"s0", "s1"}
	err = c.BatchPut(ctx, "step-7", keys, tq.Batch{
		"input_ids": tq.Stacked([]int64{1, 2, 3, 4, 5, 6}, 2, 3),
		"responses": tq.JaggedOf([][]int64{{7, 8}, {9}}),
		"uid":       tq.ValuesOf([]string{"p0", "p0"}),
	}, []tq.Tag{{"status": "generated"}, {"status": "generated"}})
	if err != nil {
		log.Fatal(err)
	}
	// Later the reward worker adds a column to the same rows and updates
	// their tags.
	err = c.BatchPut(ctx, "step-7", keys, tq.Batch{
		"rewards": tq.Stacked([]float32{1, 0}, 2),
	}, []tq.Tag{{"status": "rewarded"}, {"status": "rewarded"}})
	if err != nil {
		log.Fatal(err)
	}

	m, err := c.List(ctx, "step-7")
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range m.Rows {
		fmt.Println(r.Key, r.Index, len(r.Fields), r.Tag["status"])
	}

	// A malformed call writes nothing.
	err = c.BatchPut(ctx, "step-7", keys, tq.Batch{"bad field": tq.Stacked([]int64{1, 2}, 2)}, nil)
	fmt.Println(errors.Is(err, tq.ErrInvalid))
	// Output:
	// s0 0 4 rewarded
	// s1 1 4 rewarded
	// true
}

func ExampleClient_BatchGet() {
	ctx := context.Background()
	c, err := tq.Open(ctx, "")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	err = c.BatchPut(ctx, "step-7", []string{"s0", "s1", "s2"}, tq.Batch{
		"responses": tq.JaggedOf([][]int64{{7, 8}, {9}, {10, 11, 12}}),
		"rewards":   tq.Stacked([]float32{0.5, 1, 0}, 3),
	}, nil)
	if err != nil {
		log.Fatal(err)
	}

	// Rows come back in the order asked for; rewards come back stacked.
	b, err := c.BatchGet(ctx, "step-7", []string{"s2", "s0"}, "responses", "rewards")
	if err != nil {
		log.Fatal(err)
	}
	rewards, _ := tq.As[float32](b["rewards"])
	responses, _ := tq.RowsAs[int64](b["responses"])
	fmt.Println(b["rewards"].Kind(), rewards)
	fmt.Println(b["responses"].Kind(), responses)

	// A field not written yet names the key and the field.
	_, err = c.BatchGet(ctx, "step-7", []string{"s0"}, "advantages")
	var ke *tq.KeyError
	if errors.Is(err, tq.ErrNotReady) && errors.As(err, &ke) {
		fmt.Println("not ready:", ke.Key, ke.Field)
	}
	// Output:
	// stacked [0 0.5]
	// jagged [[10 11 12] [7 8]]
	// not ready: s0 advantages
}

func ExampleTask_Consume() {
	ctx := context.Background()
	c, err := tq.Open(ctx, "memory://", tq.WithName("reward-worker-0"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	keys := []string{"s0", "s1", "s2"}
	err = c.BatchPut(ctx, "step-0", keys, tq.Batch{"responses": tq.JaggedOf([][]int64{{7, 8}, {9}, {}})}, nil)
	if err != nil {
		log.Fatal(err)
	}

	// A reward worker: each lease's rows are scored and written back. A nil
	// result acknowledges them; an error would return them for another
	// try, tq.Permanent(err) drop them. The lease is extended while the
	// handler runs, however long it takes.
	task, err := c.Task("step-0", "reward", []string{"responses"})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(ctx)
	err = task.Consume(ctx, 2, func(ctx context.Context, l *tq.Lease) error {
		rows, err := tq.RowsAs[int64](l.Data["responses"])
		if err != nil {
			return tq.Permanent(err) // not what a reward is computed from
		}
		rewards := make([]float32, len(rows))
		for i, r := range rows {
			rewards[i] = float32(len(r))
		}
		if err := c.BatchPut(ctx, "step-0", l.Keys(), tq.Batch{"rewards": tq.Stacked(rewards)}, nil); err != nil {
			return err
		}
		if st, _ := task.Status(ctx); st.Acked+l.Len() == len(keys) {
			stop() // every row scored: this example ends here
		}
		return nil
	}, tq.ClaimWith(tq.WithData()))
	fmt.Println(err)

	b, err := c.BatchGet(context.Background(), "step-0", keys, "rewards")
	if err != nil {
		log.Fatal(err)
	}
	rewards, _ := tq.As[float32](b["rewards"])
	fmt.Println(rewards)
	// Output:
	// <nil>
	// [2 1 0]
}
