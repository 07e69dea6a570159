package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/tq"
)

// The queue suite: what consuming through tq costs, each beside its limit
// in the same rotation.
//
//   - claim+ack: a Claim of a step's rows and the Ack of them, beside a
//     List of the same rows (what a poller reads to find them);
//   - wake-up: from a producer's BatchPut returning (its commit applied)
//     to a consumer blocked in Wait returning with the row, beside a
//     channel hand-off (in process) or an LPUSH to a client blocked in
//     BLPOP on the same server;
//   - contention: claims per second of consumers claiming and acking a
//     partition's rows together, beside the same consumers popping a
//     buffered channel (in process) or LPOP of a Redis list.

const queuePartition = "tqgo-bench/queue"

func queueTargets(targets []*target) []*target {
	var out []*target
	for _, t := range targets {
		if t.kv && (t.isRedis() || t.url == "memory://") {
			out = append(out, t)
		}
	}
	return out
}

func queueSteps(cfg Config, targets []*target, m *meter) int {
	return m.planSteps(7 * len(queueTargets(targets)))
}

// queueRows writes n one-field rows into a fresh partition.
func queueRows(ctx context.Context, c *tq.Client, partition string, n int) error {
	keys := make([]string, n)
	ids := make([]int64, n)
	for i := range keys {
		keys[i] = "r" + strconv.Itoa(i)
		ids[i] = int64(i)
	}
	if err := c.ClearPartition(ctx, partition); err != nil {
		return err
	}
	return c.BatchPut(ctx, partition, keys, tq.Batch{"id": tq.Stacked(ids, n)}, nil)
}

func runQueue(ctx context.Context, cfg Config, m *meter, targets []*target, rep *Report) error {
	ts := queueTargets(targets)
	if len(ts) == 0 {
		rep.note("queue: no engine to run")
		return nil
	}
	step := &Table{
		ID:    "queue",
		Title: fmt.Sprintf("Queue: claim and ack of a %d-row step; wake-up; %d consumers", cfg.Samples, cfg.Consumers),
		Intro: fmt.Sprintf("claim+ack: one Claim of the %d rows of a partition and one Ack of them, beside a List of the same rows. "+
			"wake-up: from a producer's BatchPut of one row returning to a consumer blocked in Wait returning with it (0 when the consumer returned first), beside a bare "+
			"hand-off (a channel in process; LPUSH to a client blocked in BLPOP on the same Redis server). contention: %d consumers "+
			"claim %d rows at a time and ack them until %d rows are consumed, beside the same consumers popping as many items from a "+
			"buffered channel (in process) or with LPOP of a Redis list. Median [min–max] of the repetitions; \"ratio\" is the "+
			"engine's time over the limit's.", cfg.Samples, cfg.Consumers, queueBatch, cfg.Samples*4),
		Header: []string{"engine", "measure", "tq", "limit", "limit time", "ratio"},
	}
	for _, t := range ts {
		// The client is over an engine the bench holds too, so that the
		// bare wake-up can wait on the engine's own Wait.
		eng, err := backends.Open(ctx, t.url)
		if err != nil {
			return fmt.Errorf("open %s: %w", t.name, err)
		}
		defer eng.Data.Close()
		defer eng.Meta.Close()
		c, err := tq.New(eng)
		if err != nil {
			return fmt.Errorf("open %s: %w", t.name, err)
		}
		defer c.Close()
		var raw *redis.Client
		if t.isRedis() {
			raw = redis.NewClient(t.redisOpts)
			defer raw.Close()
		}
		arms, rows, err := queueArms(ctx, cfg, c, eng, raw, t.name)
		if err != nil {
			return err
		}
		if _, err := m.run(ctx, "queue "+t.name, arms); err != nil {
			return err
		}
		for _, r := range rows {
			d, ld := summarize(r.a.samples), summarize(r.lim.samples)
			step.Rows = append(step.Rows, []string{t.name, r.measure, fmtTime(d), r.limName, fmtTime(ld), fmtRatio(d.Median / ld.Median)})
			rep.Records = append(rep.Records,
				Record{Suite: "queue", Table: "queue", Row: t.name, Series: r.measure, Unit: "s", Dist: d},
				Record{Suite: "queue", Table: "queue", Row: t.name, Series: r.measure + " limit: " + r.limName, Unit: "s", Dist: ld})
		}
		if err := c.ClearPartition(ctx, queuePartition); err != nil {
			return err
		}
	}
	rep.Tables = append(rep.Tables, step)
	return nil
}

type queueRow struct {
	measure, limName string
	a, lim           *arm
}

// queueBatch is how many rows each consumer of the contention measure
// claims at a time.
const queueBatch = 8

func queueArms(ctx context.Context, cfg Config, c *tq.Client, eng backends.Engine, raw *redis.Client, name string) ([]*arm, []queueRow, error) {
	n := cfg.Samples
	task, err := c.Task(queuePartition, "bench", []string{"id"}, tq.LeaseFor(time.Minute))
	if err != nil {
		return nil, nil, err
	}
	claimAck := &arm{name: name + " claim+ack", timed: func() (time.Duration, error) {
		if err := queueRows(ctx, c, queuePartition, n); err != nil {
			return 0, err
		}
		start := time.Now()
		l, err := task.Claim(ctx, n)
		if err != nil {
			return 0, err
		}
		if err := l.Ack(ctx); err != nil {
			return 0, err
		}
		d := time.Since(start)
		if l.Len() != n {
			return 0, fmt.Errorf("claim leased %d rows of %d", l.Len(), n)
		}
		return d, nil
	}}
	list := &arm{name: name + " List", timed: func() (time.Duration, error) {
		if err := queueRows(ctx, c, queuePartition, n); err != nil {
			return 0, err
		}
		start := time.Now()
		m, err := c.List(ctx, queuePartition)
		if err != nil {
			return 0, err
		}
		d := time.Since(start)
		if len(m.Rows) != n {
			return 0, fmt.Errorf("list found %d rows of %d", len(m.Rows), n)
		}
		return d, nil
	}}
	wake := &arm{name: name + " wake-up", timed: func() (time.Duration, error) { return wakeOnce(ctx, c) }}
	notify := &arm{name: name + " notify", timed: func() (time.Duration, error) { return notifyOnce(ctx, c, eng) }}
	var handoff *arm
	limWake := "channel hand-off"
	if raw != nil {
		limWake = "LPUSH to BLPOP"
		handoff = &arm{name: name + " BLPOP", timed: func() (time.Duration, error) { return blpopOnce(ctx, raw) }}
	} else {
		handoff = &arm{name: name + " channel", timed: chanOnce}
	}
	total := n * 4
	contend := &arm{name: name + " contention", timed: func() (time.Duration, error) {
		return contention(ctx, c, total, cfg.Consumers)
	}}
	var popLimit *arm
	limPop := "channel pop"
	if raw != nil {
		limPop = "LPOP of a list"
		popLimit = &arm{name: name + " LPOP", timed: func() (time.Duration, error) { return lpopContention(ctx, raw, total, cfg.Consumers) }}
	} else {
		popLimit = &arm{name: name + " channel pop", timed: func() (time.Duration, error) { return chanContention(total, cfg.Consumers), nil }}
	}
	return []*arm{claimAck, list, wake, notify, handoff, contend, popLimit}, []queueRow{
		{"claim+ack", "List", claimAck, list},
		{"wake-up: the engine's Wait returns", limWake, notify, handoff},
		{"wake-up and claim: Task.Wait returns the row", limWake, wake, handoff},
		{fmt.Sprintf("contention: %d consumers, per claim", cfg.Consumers), limPop, contend, popLimit},
	}, nil
}

// wakeGap is how long a measure of wake-up lets its consumer block
// before the producer writes.
const wakeGap = 2 * time.Millisecond

// wakeOnce times one hand-off through the queue.
func wakeOnce(ctx context.Context, c *tq.Client) (time.Duration, error) {
	p := queuePartition + "/wake"
	if err := c.ClearPartition(ctx, p); err != nil {
		return 0, err
	}
	task, err := c.Task(p, "waker", []string{"id"})
	if err != nil {
		return 0, err
	}
	return timeWake(ctx, c, p, func(ctx context.Context) (func() error, error) {
		l, err := task.Wait(ctx, 1)
		if err != nil {
			return nil, err
		}
		return func() error { return l.Ack(ctx) }, nil
	})
}

// notifyOnce times the engine's wake-up alone: from a producer's BatchPut
// returning to the engine's Wait, blocked on the partition, returning.
func notifyOnce(ctx context.Context, c *tq.Client, eng backends.Engine) (time.Duration, error) {
	p := queuePartition + "/notify"
	none := func([]*backends.Row, []backends.Delivery) (backends.Picked, error) { return backends.Picked{}, nil }
	got, err := eng.Meta.Claim(ctx, p, backends.ClaimRequest{Task: "notify", Lease: time.Minute, Rows: 1, Min: 1, Custom: true}, none)
	if err != nil {
		return 0, err
	}
	d, err := timeWake(ctx, c, p, func(ctx context.Context) (func() error, error) {
		return nil, eng.Meta.Wait(ctx, p, got.Mark)
	})
	if err != nil {
		return 0, err
	}
	return d, c.ClearPartition(ctx, p)
}

// timeWake runs wait, lets it block for wakeGap, puts one row into p, and
// returns the time from the put returning to wait returning (0 when wait
// returned first). What wait
// returns to do next (an ack) runs after the time is taken.
func timeWake(ctx context.Context, c *tq.Client, p string, wait func(context.Context) (func() error, error)) (time.Duration, error) {
	type woke struct {
		at  time.Time
		err error
	}
	done := make(chan woke, 1)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	go func() {
		then, err := wait(wctx)
		at := time.Now()
		if err == nil && then != nil {
			err = then()
		}
		done <- woke{at, err}
	}()
	time.Sleep(wakeGap)
	if err := c.BatchPut(ctx, p, []string{"x"}, tq.Batch{"id": tq.Stacked([]int64{1}, 1)}, nil); err != nil {
		return 0, err
	}
	put := time.Now()
	w := <-done
	if w.err != nil {
		return 0, w.err
	}
	return max(w.at.Sub(put), 0), nil
}

func chanOnce() (time.Duration, error) {
	ch := make(chan struct{})
	done := make(chan time.Time, 1)
	go func() {
		<-ch
		done <- time.Now()
	}()
	time.Sleep(wakeGap)
	sent := time.Now()
	ch <- struct{}{}
	return max((<-done).Sub(sent), 0), nil
}

func blpopOnce(ctx context.Context, raw *redis.Client) (time.Duration, error) {
	const key = "tqgo-bench:wake"
	done := make(chan error, 1)
	var at time.Time
	go func() {
		_, err := raw.BLPop(ctx, 30*time.Second, key).Result()
		at = time.Now()
		done <- err
	}()
	time.Sleep(wakeGap)
	if err := raw.LPush(ctx, key, "1").Err(); err != nil {
		return 0, err
	}
	pushed := time.Now()
	if err := <-done; err != nil {
		return 0, err
	}
	return max(at.Sub(pushed), 0), nil
}

// contention times consumers claiming and acking total rows, and returns
// the time per claim.
func contention(ctx context.Context, c *tq.Client, total, consumers int) (time.Duration, error) {
	p := queuePartition + "/contend"
	if err := queueRows(ctx, c, p, total); err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var claims, got int
	var first error
	start := time.Now()
	for range consumers {
		task, err := c.Task(p, "contend", []string{"id"})
		if err != nil {
			return 0, err
		}
		wg.Go(func() {
			for {
				l, err := task.Claim(ctx, queueBatch)
				if err == nil && l.Len() > 0 {
					err = l.Ack(ctx)
				}
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				done := err != nil || l.Len() == 0
				if !done {
					claims++
					got += l.Len()
				}
				mu.Unlock()
				if done {
					return
				}
			}
		})
	}
	wg.Wait()
	d := time.Since(start)
	if first != nil {
		return 0, first
	}
	if got != total {
		return 0, fmt.Errorf("consumers claimed %d rows of %d", got, total)
	}
	return d / time.Duration(claims), nil
}

func chanContention(total, consumers int) time.Duration {
	ch := make(chan int, total)
	for i := range total {
		ch <- i
	}
	close(ch)
	var wg sync.WaitGroup
	start := time.Now()
	for range consumers {
		wg.Go(func() {
			for range ch {
			}
		})
	}
	wg.Wait()
	return time.Since(start) / time.Duration((total+queueBatch-1)/queueBatch)
}

func lpopContention(ctx context.Context, raw *redis.Client, total, consumers int) (time.Duration, error) {
	const key = "tqgo-bench:contend"
	items := make([]any, total)
	for i := range items {
		items[i] = i
	}
	if err := raw.Del(ctx, key).Err(); err != nil {
		return 0, err
	}
	if err := raw.RPush(ctx, key, items...).Err(); err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var pops int
	var first error
	start := time.Now()
	for range consumers {
		wg.Go(func() {
			for {
				vals, err := raw.LPopCount(ctx, key, queueBatch).Result()
				if errors.Is(err, redis.Nil) || err == nil && len(vals) == 0 {
					return
				}
				mu.Lock()
				if err != nil {
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
				pops++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	d := time.Since(start)
	if first != nil {
		return 0, first
	}
	return d / time.Duration(pops), nil
}
