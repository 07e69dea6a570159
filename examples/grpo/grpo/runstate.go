package grpo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// The run's row of RunPartition: the first process of a run writes it,
// before anything else of the run; every process reads it when it
// starts, to tell the live run it joins (a restarted role, or a role
// started late) from a finished run's leftovers.
const (
	runKey      = "run"
	fConfig     = "config"   // string: the runConfig, as JSON
	tagRunID    = "id"       // string: a digest of the config
	tagStarted  = "started"  // string: when the row was written (RFC 3339)
	tagFinished = "finished" // bool: set by trainer rank 0 after the last step
)

// runConfig is the part of a Config the processes of one run must agree
// on; its JSON names are the flags'.
type runConfig struct {
	Steps     int     `json:"steps"`
	Prompts   int     `json:"prompts"`
	Group     int     `json:"group"`
	Length    int     `json:"len"`
	Vocab     int     `json:"vocab"`
	LR        float64 `json:"lr"`
	ClipEps   float64 `json:"clip"`
	Epochs    int     `json:"epochs"`
	Seed      uint64  `json:"seed"`
	Ranks     int     `json:"ranks"`
	Staleness int     `json:"staleness"`
	Lag       int     `json:"lag"`
}

func (c Config) runConfig() runConfig {
	return runConfig{Steps: c.Steps, Prompts: c.Prompts, Group: c.Group, Length: c.Length, Vocab: c.Vocab,
		LR: c.LR, ClipEps: c.ClipEps, Epochs: c.Epochs, Seed: c.Seed, Ranks: c.Ranks, Staleness: c.Staleness, Lag: c.Lag}
}

// join finds the run the queue holds, or starts one. A run is its
// configuration: a process given the same one joins the live run (its id
// is a digest of the configuration, so processes starting at once write
// the same row); a finished run, a live run of another configuration,
// and partitions of the loop without a run row (an older example's) are
// errors that say what to do.
func (r *runner) join(ctx context.Context) error {
	js, err := json.Marshal(r.cfg.runConfig())
	if err != nil {
		return fmt.Errorf("grpo: %w", err)
	}
	sum := sha256.Sum256(js)
	id := hex.EncodeToString(sum[:6])
	// The partitions first, the run row second: the row is written before
	// any other partition of a run, so a partition listed here with no
	// row found after it is not a live run's.
	parts, err := r.c.Partitions(ctx)
	if err != nil {
		return fmt.Errorf("grpo: %w", err)
	}
	var ours []string
	for _, p := range parts {
		if strings.HasPrefix(p, partitionPrefix) {
			ours = append(ours, p)
		}
	}
	m, err := r.c.List(ctx, RunPartition)
	if err != nil {
		return fmt.Errorf("grpo: %w", err)
	}
	if len(m.Rows) == 0 {
		if len(ours) > 0 {
			return fmt.Errorf("grpo: the queue holds %d partitions of an earlier run (%s ...) and no run row: clear them (tq clear -yes %s, for each) or use another queue", len(ours), ours[0], ours[0])
		}
		started := time.Now().UTC().Format(time.RFC3339)
		err := r.put(ctx, RunPartition, []string{runKey}, tq.Batch{fConfig: tq.ValuesOf([]string{string(js)})},
			[]tq.Tag{{tagRunID: id, tagStarted: started}})
		if err != nil {
			return fmt.Errorf("grpo: start the run: %w", err)
		}
		r.log.Info("started a run", "role", r.cfg.role(), "run", id)
		return nil
	}
	row := m.Rows[0]
	b, err := r.c.BatchGet(ctx, RunPartition, []string{runKey}, fConfig)
	if err != nil {
		return fmt.Errorf("grpo: read the run: %w", err)
	}
	cfgs, err := tq.ValuesAs[string](b[fConfig])
	if err != nil {
		return fmt.Errorf("grpo: read the run: %w", err)
	}
	theirID, _ := row.Tag[tagRunID].(string)
	started, _ := row.Tag[tagStarted].(string)
	if finished, _ := row.Tag[tagFinished].(bool); finished {
		return fmt.Errorf("grpo: the queue holds run %s (started %s), which finished: its partitions (%s) are leftovers; clear them (tq clear -yes %s, for each) or use another queue",
			theirID, started, strings.Join(ours, ", "), RunPartition)
	}
	if cfgs[0] != string(js) {
		return fmt.Errorf("grpo: the queue holds live run %s (started %s) of another configuration: %s; give this process the run's flags, or use another queue (a prefix of its own)",
			theirID, started, configDiff(cfgs[0], r.cfg.runConfig()))
	}
	r.log.Info("joined the live run", "role", r.cfg.role(), "run", id, "started", started)
	return nil
}

// configDiff says how the run's configuration (JSON) differs from mine,
// by flag name.
func configDiff(theirs string, mine runConfig) string {
	var run runConfig
	if err := json.Unmarshal([]byte(theirs), &run); err != nil {
		return fmt.Sprintf("%s (unreadable: %v)", theirs, err)
	}
	var diffs []string
	rv, mv := reflect.ValueOf(run), reflect.ValueOf(mine)
	for i := range rv.NumField() {
		if a, b := rv.Field(i).Interface(), mv.Field(i).Interface(); a != b {
			diffs = append(diffs, fmt.Sprintf("-%s %v (this process: %v)", rv.Type().Field(i).Tag.Get("json"), a, b))
		}
	}
	return strings.Join(diffs, ", ")
}

// finish marks the run finished: a process started on the queue from now
// on is told to clear it.
func (r *runner) finish(ctx context.Context) error {
	err := r.update(ctx, RunPartition, []string{runKey}, tq.Batch{}, []tq.Tag{{tagFinished: true}})
	if err != nil {
		return fmt.Errorf("mark the run finished: %w", err)
	}
	return nil
}
