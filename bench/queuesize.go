package main

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/tq"
)

// Claim cost against partition size: Claim(queueBatch) and the Ack of the
// lease on a partition of n ready rows, timed one by one, beside
// XREADGROUP COUNT queueBatch + XACK on a stream of n entries (Redis).
// Each sample is a task (or a consumer group) of its own, so that it
// starts on n ready rows: sizeWarm claims, then sizeClaims claims timed,
// the sample their median.
const (
	sizeWarm    = 5
	sizeClaims  = 50
	sizeMinRows = (sizeWarm + sizeClaims) * queueBatch
)

func sizeTable(cfg Config) *Table {
	lo := "n/a"
	if len(cfg.QueueSizes) > 0 {
		lo = fmtCount(cfg.QueueSizes[0])
	}
	return &Table{
		ID:    "queue-size",
		Title: "Queue: claim cost against partition size",
		Intro: fmt.Sprintf("Claim(%d) and the Ack of its lease on a partition holding n ready one-field rows (written by the producer "+
			"with BatchPut in chunks of %d rows; claimed on the consumer's Client), each claim+ack timed alone: a sample is the median of %d claims after a warm-up of %d and a garbage collection (the warm-up's first claim builds the task's ready index), "+
			"by a task of its own (so that every sample starts on n ready rows); the limit, on Redis, is XREADGROUP COUNT %d + XACK "+
			"of the IDs read on a stream of n entries, timed alike, each sample a consumer group of its own. Median [min–max] "+
			"of the repetitions; \"÷ %s rows\" is the median over the median at %s rows; \"ratio\" is tq's time over the limit's.",
			queueBatch, queueChunk, sizeClaims, sizeWarm, queueBatch, lo, lo),
		Header: []string{"engine", "ready rows", fmt.Sprintf("tq Claim(%d)+Ack", queueBatch), "÷ " + lo + " rows",
			"limit", "limit time", "limit ÷ " + lo + " rows", "ratio"},
	}
}

// fmtCount prints a row count with thousands separators: 100,000.
func fmtCount(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func runQueueSize(ctx context.Context, cfg Config, m *meter, rig *queueRig, tbl *Table, rep *Report) ([]serverRow, error) {
	if len(cfg.QueueSizes) == 0 {
		return nil, nil
	}
	name, c, consumer, raw := rig.t.name, rig.clients[0], rig.clients[1], rig.raw
	type sized struct {
		n       int
		a, lim  *arm
		am, lm  *serverMeter
		part    string
		stream  string
		limName string
	}
	var all []*sized
	var arms []*arm
	defer func() {
		for _, s := range all {
			c.ClearPartition(context.WithoutCancel(ctx), s.part)
			if raw != nil {
				raw.Del(context.WithoutCancel(ctx), s.stream)
			}
		}
	}()
	for _, n := range cfg.QueueSizes {
		s := &sized{n: n, part: fmt.Sprintf("%s/size/%d", queuePartition, n), stream: fmt.Sprintf("tqgo-bench:size-stream:%d", n)}
		all = append(all, s)
		if err := queueRows(ctx, c, s.part, n); err != nil {
			return nil, err
		}
		if raw != nil {
			s.am = newServerMeter(rig.info, rig.t.redisOpts, true)
			s.lm = newServerMeter(rig.info, rig.t.redisOpts, false)
		}
		s.a = &arm{name: fmt.Sprintf("%s claim cost %d", name, n), once: true, timed: sizeSample(ctx, consumer, s.part, s.am)}
		arms = append(arms, s.a)
		if raw != nil {
			if err := fillStream(ctx, raw, s.stream, n); err != nil {
				return nil, err
			}
			s.limName = fmt.Sprintf("XREADGROUP COUNT %d + XACK", queueBatch)
			s.lim = &arm{name: fmt.Sprintf("%s XREADGROUP cost %d", name, n), once: true, timed: streamSizeSample(ctx, raw, s.stream, s.lm)}
			arms = append(arms, s.lim)
		}
	}
	if _, err := m.run(ctx, "queue size "+name, arms); err != nil {
		return nil, err
	}
	var srows []serverRow
	base, lbase := summarize(all[0].a.samples), Dist{}
	if all[0].lim != nil {
		lbase = summarize(all[0].lim.samples)
	}
	for _, s := range all {
		d := summarize(s.a.samples)
		row := []string{name, fmtCount(s.n), fmtTime(d), fmtRatio(d.Median / base.Median), "—", "n/a", "n/a", "n/a"}
		rep.Records = append(rep.Records, Record{Suite: "queue", Table: tbl.ID, Row: name + " " + strconv.Itoa(s.n), Series: "tq claim+ack", Unit: "s", Dist: d})
		if s.lim != nil {
			ld := summarize(s.lim.samples)
			row[4], row[5], row[6], row[7] = s.limName, fmtTime(ld), fmtRatio(ld.Median/lbase.Median), fmtRatio(d.Median/ld.Median)
			rep.Records = append(rep.Records, Record{Suite: "queue", Table: tbl.ID, Row: name + " " + strconv.Itoa(s.n), Series: "limit: " + s.limName, Unit: "s", Dist: ld})
			srows = append(srows, serverRow{fmt.Sprintf("Claim(%d)+Ack, %s ready rows", queueBatch, fmtCount(s.n)), s.a, s.am, s.limName, s.lim, s.lm})
		}
		tbl.Rows = append(tbl.Rows, row)
	}
	return srows, nil
}

// sizeSample is a sample of claim cost on partition p: a task of its own
// claims and acks sizeWarm times, then sizeClaims times, each timed; it
// returns their median.
func sizeSample(ctx context.Context, c *tq.Client, p string, sm *serverMeter) func() (time.Duration, error) {
	k := 0
	return func() (time.Duration, error) {
		k++
		task, err := c.Task(p, "size-"+strconv.Itoa(k), []string{"id"}, tq.LeaseFor(time.Minute))
		if err != nil {
			return 0, err
		}
		return medianOfClaims(ctx, sm, func() error {
			l, err := task.Claim(ctx, queueBatch)
			if err != nil {
				return err
			}
			if l.Len() != queueBatch {
				return fmt.Errorf("claim leased %d rows of %d", l.Len(), queueBatch)
			}
			return l.Ack(ctx)
		})
	}
}

// streamSizeSample is sizeSample's limit: a consumer group of its own
// reads and acks queueBatch entries of the stream at a time.
func streamSizeSample(ctx context.Context, raw *redis.Client, key string, sm *serverMeter) func() (time.Duration, error) {
	k := 0
	return func() (time.Duration, error) {
		k++
		group := "size-" + strconv.Itoa(k)
		if err := raw.XGroupCreate(ctx, key, group, "0").Err(); err != nil {
			return 0, err
		}
		return medianOfClaims(ctx, sm, func() error {
			res, err := raw.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "c", Streams: []string{key, ">"}, Count: queueBatch, Block: -1}).Result()
			if err != nil {
				return err
			}
			ids := entryIDs(res)
			if len(ids) != queueBatch {
				return fmt.Errorf("XREADGROUP read %d entries of %d", len(ids), queueBatch)
			}
			return raw.XAck(ctx, key, group, ids...).Err()
		})
	}
}

// medianOfClaims runs claim sizeWarm times, collects garbage, then runs
// it sizeClaims times timed one by one (the server's work over those
// recorded by sm), and returns the median.
func medianOfClaims(ctx context.Context, sm *serverMeter, claim func() error) (time.Duration, error) {
	for range sizeWarm {
		if err := claim(); err != nil {
			return 0, err
		}
	}
	// The warm-up's first claim builds the task's ready index over every
	// row: a collection now keeps its garbage out of the timed claims.
	runtime.GC()
	sp, err := sm.begin(ctx)
	if err != nil {
		return 0, err
	}
	ds := make([]float64, sizeClaims)
	for i := range ds {
		start := time.Now()
		if err := claim(); err != nil {
			return 0, err
		}
		ds[i] = time.Since(start).Seconds()
	}
	if err := sp.end(ctx, sizeClaims); err != nil {
		return 0, err
	}
	return time.Duration(summarize(ds).Median * float64(time.Second)), nil
}
