package tq_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/tqgo/tqgo/tq"
)

// Reading a batch: tensor columns with As or RowsAs (stacked or jagged
// alike), values columns with ValuesAs, and a misspelled field as an error.
func ExampleBatch_Column() {
	ctx := context.Background()
	c, err := tq.Open(ctx, "")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	keys := []string{"s0", "s1"}
	err = c.BatchPut(ctx, "step-1", keys, tq.Batch{
		"responses": tq.JaggedOf([][]int64{{7, 8}, {9}}),
		"rewards":   tq.Stacked([]float32{1, 0}),
		"step":      tq.ValuesOf([]int{3, 3}),
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	b, err := c.BatchGet(ctx, "step-1", keys)
	if err != nil {
		log.Fatal(err)
	}

	resp, _ := tq.RowsAs[int64](b["responses"]) // jagged: rows of different lengths
	rewards, _ := tq.As[float32](b["rewards"])  // stacked: one [2] tensor
	steps, _ := tq.ValuesAs[int](b["step"])     // stored ints read back as int64; int holds them
	fmt.Println(resp, rewards, steps, b["rewards"].Shape())

	_, err = b.Column("reward")
	fmt.Println(errors.Is(err, tq.ErrNoField), err)
	_, err = tq.As[float32](b["reward"])
	fmt.Println(errors.Is(err, tq.ErrNoField))
	// Output:
	// [[7 8] [9]] [1 0] [3 3] [2]
	// true tq: no such field in the batch: "reward" (the batch has ["responses" "rewards" "step"])
	// true
}
