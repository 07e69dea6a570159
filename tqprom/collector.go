package tqprom

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tqgo/tqgo/tq"
)

// ops are the values of the op label: every op a tq.Client traces (see
// tq.Call), and "other" for one this package does not know (an op tq
// added since), so that the label stays a fixed set.
var ops = []string{
	"BatchPut", "BatchGet", "BatchGetInto", "BatchGetByMeta",
	"List", "Lookup", "Partitions", "Clear", "ClearPartition", "ClearFields", "Reclaim", "SetCapacity",
	"Claim", "Wait", "Ack", "Nack", "Extend",
	"Status", "TaskStatus", "Consumption", "TaskConsumption", "Dead", "Retry", "Drop", "ResetConsumption", "Stragglers", "Members", "Pace", "AwaitInsert", "AwaitSample",
	opOther,
}

const opOther = "other"

// Collector counts the calls of the tq clients that trace through it (it
// is a tq.Tracer: pass it to tq.WithTracer) and, at each scrape, reports
// the state of the partitions and tasks it watches (it is a
// prometheus.Collector: see Register). One Collector may serve several
// clients; their calls are counted together. A Collector is safe for
// concurrent use, and holds no goroutine between scrapes.
type Collector struct {
	opts options

	calls      *prometheus.CounterVec   // op, class
	duration   *prometheus.HistogramVec // op
	rows       *prometheus.CounterVec   // op
	cells      *prometheus.CounterVec   // op
	bytes      *prometheus.CounterVec   // op
	roundTrips *prometheus.CounterVec   // op
	retries    *prometheus.CounterVec   // op
	scrapeErrs *prometheus.CounterVec   // partition

	byOp map[string]*opMetrics // every op of ops; read-only after New

	partitionRows *prometheus.Desc // partition
	taskRows      *prometheus.Desc // partition, task, state
	redelivered   *prometheus.Desc // partition, task
	deadLease     *prometheus.Desc // partition, task
	leases        *prometheus.Desc // partition, task
	conns         *prometheus.Desc // state
	connTimeouts  *prometheus.Desc
	leaseLeft     *prometheus.Desc // partition, task
	claimSkipped  *prometheus.Desc // partition, task
	claimDropped  *prometheus.Desc // partition, task
	consumed      *prometheus.Desc // partition, task
	readyAge      *prometheus.Desc // partition, task
	leaseAge      *prometheus.Desc // partition, task
	members       *prometheus.Desc // group, state
	seenAge       *prometheus.Desc // group

	mu         sync.Mutex // guards the watches and leaseSeen
	partitions map[string]*partitionWatch
	tasks      map[taskKey][]*tq.Task // the handles of each watched (partition, task)
	presence   map[string]*tq.Client  // watched presence groups, and the client that reads each
	watched    int                    // label sets of partitions, tasks and groups, at most opts.watchLimit
	// leaseSeen is, for each watched (partition, task), when a scrape
	// first saw each of its running leases (by tq.LeaseStatus.ID): the
	// leases of the last scrape only, so it holds no more than run.
	leaseSeen map[taskKey]map[string]time.Time
}

// opMetrics are one op's series, made at its first call (so that an op
// never called exports none).
type opMetrics struct {
	once                                   sync.Once
	rows, cells, bytes, roundTrip, retries prometheus.Counter
	duration                               prometheus.Observer
}

var (
	_ tq.Tracer            = (*Collector)(nil)
	_ prometheus.Collector = (*Collector)(nil)
)

// New returns a Collector with nothing watched. It fails with ErrInvalid
// on an invalid option.
func New(opts ...Option) (*Collector, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	c := &Collector{
		opts: o,
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tq_calls_total",
			Help: "Calls of tq clients that ended, by op (the client method) and class (ok, or the kind of error).",
		}, []string{"op", "class"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tq_call_duration_seconds",
			Help:    "Time tq calls took, in seconds, failed ones included, by op.",
			Buckets: o.buckets,
		}, []string{"op"}),
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tq_call_rows_total",
			Help: "Rows tq calls wrote, read, listed, looked up, cleared, leased or settled, by op.",
		}, []string{"op"}),
		cells: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tq_call_cells_total",
			Help: "Cells (row, field) tq calls wrote, read or deleted, by op.",
		}, []string{"op"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tq_call_bytes_total",
			Help: "Bytes of the cells tq calls wrote or read, by op.",
		}, []string{"op"}),
		roundTrips: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tq_call_round_trips_total",
			Help: "Requests to the engine's servers tq calls waited on, by op (0 for an in-process engine).",
		}, []string{"op"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tq_call_retries_total",
			Help: "Engine requests tq calls made again after the server was unavailable, by op (see tq.RetryPolicy).",
		}, []string{"op"}),
		scrapeErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tq_scrape_errors_total",
			Help: "Scrapes that could not read a watched partition's status (error or scrape timeout), by partition.",
		}, []string{"partition"}),
		partitionRows: prometheus.NewDesc("tq_partition_rows",
			"Committed rows of a watched partition, as of the scrape.",
			[]string{"partition"}, nil),
		taskRows: prometheus.NewDesc("tq_task_rows",
			"Rows of a watched partition by a watched task's state (ready, waiting, leased, acked, dead, dropped), as tq.Client.Status counts them at the scrape.",
			[]string{"partition", "task", "state"}, nil),
		redelivered: prometheus.NewDesc("tq_task_redelivered_rows",
			"Rows of a watched partition, ready or leased for a watched task, that were delivered before without an ack, as tq.Client.Status counts them at the scrape.",
			[]string{"partition", "task"}, nil),
		deadLease: prometheus.NewDesc("tq_task_dead_lease_ended_rows",
			"Dead rows of a watched partition for a watched task whose last lease ended unsettled (a consumer too slow for its lease, or gone), as tq.TaskStatus.DeadLeaseEnded counts them at the scrape; the rest of tq_task_rows{state=\"dead\"} died of an error (tq dead lists each with its reason).",
			[]string{"partition", "task"}, nil),
		conns: prometheus.NewDesc("tq_engine_connections",
			"Connections of the watched clients' engines to their servers, busy or idle, as of the scrape (absent for an in-process engine).",
			[]string{"state"}, nil),
		connTimeouts: prometheus.NewDesc("tq_engine_connection_timeouts_total",
			"Requests of the watched clients' engines that gave up waiting for a free connection (a pool too small for the load).",
			nil, nil),
		leases: prometheus.NewDesc("tq_task_leases",
			"Running leases of a watched task in a watched partition (each held by one consumer), as tq.Client.Status lists them at the scrape.",
			[]string{"partition", "task"}, nil),
		leaseLeft: prometheus.NewDesc("tq_task_lease_remaining_seconds",
			"Seconds until the earliest running lease of a watched task ends unless extended; absent when none runs. A holder that stopped extending shows as this falling to 0.",
			[]string{"partition", "task"}, nil),
		claimSkipped: prometheus.NewDesc("tq_claim_skipped_rows_total",
			"Stale rows the claims of a watched task's handles passed over, each claim counting a row again, as tq.Task.Stats counts Skipped.",
			[]string{"partition", "task"}, nil),
		claimDropped: prometheus.NewDesc("tq_claim_dropped_rows_total",
			"Rows the claims of a watched task's handles dropped, stale or by the sampler, each once, as tq.Task.Stats counts Dropped.",
			[]string{"partition", "task"}, nil),
		consumed: prometheus.NewDesc("tq_task_consumed_rows_total",
			"Rows a watched task ever acknowledged or dropped in a watched partition, rows cleared since (ClearAcked, Clear) included, as tq.TaskStatus.Consumed counts them at the scrape; it goes down only when the partition is cleared whole.",
			[]string{"partition", "task"}, nil),
		readyAge: prometheus.NewDesc("tq_task_oldest_ready_age_seconds",
			"Seconds since the oldest row ready for a watched task became ready (its last commit adding a field): how long produced rows have waited; 0 with none ready, absent when the engine does not tell.",
			[]string{"partition", "task"}, nil),
		leaseAge: prometheus.NewDesc("tq_task_oldest_lease_age_seconds",
			"Seconds since the oldest running lease of a watched task was granted (a lease whose grant time the engine does not know: since a scrape first saw it); 0 with none.",
			[]string{"partition", "task"}, nil),
		members: prometheus.NewDesc("tq_presence_members",
			"Members of a watched presence group (tq.Client.Announce) by state: alive, gone (not seen for three intervals) or left (closed its presence).",
			[]string{"group", "state"}, nil),
		seenAge: prometheus.NewDesc("tq_presence_last_seen_age_seconds",
			"Seconds since the least recently seen member of a watched presence group that has not left was last seen; 0 with none. Past three of its intervals, a member is gone.",
			[]string{"group"}, nil),
		byOp:       make(map[string]*opMetrics, len(ops)),
		partitions: map[string]*partitionWatch{},
		tasks:      map[taskKey][]*tq.Task{},
		presence:   map[string]*tq.Client{},
		leaseSeen:  map[taskKey]map[string]time.Time{},
	}
	for _, op := range ops {
		c.byOp[op] = new(opMetrics)
	}
	return c, nil
}

// Register registers the collector with reg.
func (c *Collector) Register(reg prometheus.Registerer) error {
	return reg.Register(c)
}

// scrapeKey marks the context of the calls a Collector makes to scrape,
// which no Collector counts: a dashboard of a client's calls shows the
// program's calls, not the monitoring's.
type scrapeKey struct{}

// TraceStart implements tq.Tracer; it returns ctx.
func (c *Collector) TraceStart(ctx context.Context, _ *tq.Client, _ tq.Call) context.Context {
	return ctx
}

// TraceEnd implements tq.Tracer: it counts the call.
func (c *Collector) TraceEnd(ctx context.Context, _ *tq.Client, call tq.Call, end tq.CallEnd) {
	if ctx.Value(scrapeKey{}) != nil {
		return
	}
	op := call.Op
	m, ok := c.byOp[op]
	if !ok {
		op, m = opOther, c.byOp[opOther]
	}
	m.once.Do(func() {
		m.rows = c.rows.WithLabelValues(op)
		m.cells = c.cells.WithLabelValues(op)
		m.bytes = c.bytes.WithLabelValues(op)
		m.roundTrip = c.roundTrips.WithLabelValues(op)
		m.retries = c.retries.WithLabelValues(op)
		m.duration = c.duration.WithLabelValues(op)
	})
	c.calls.WithLabelValues(op, ErrorClass(end.Err)).Inc()
	m.duration.Observe(end.Duration.Seconds())
	m.rows.Add(nonNegative(int64(end.Rows)))
	m.cells.Add(nonNegative(int64(end.Cells)))
	m.bytes.Add(nonNegative(end.Bytes))
	m.roundTrip.Add(nonNegative(end.RoundTrips))
	m.retries.Add(nonNegative(end.Retries))
}

func nonNegative(n int64) float64 { return float64(max(n, 0)) }

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, v := range c.vecs() {
		v.Describe(ch)
	}
	ch <- c.partitionRows
	ch <- c.taskRows
	ch <- c.redelivered
	ch <- c.deadLease
	ch <- c.leases
	ch <- c.conns
	ch <- c.connTimeouts
	ch <- c.leaseLeft
	ch <- c.claimSkipped
	ch <- c.claimDropped
	ch <- c.consumed
	ch <- c.readyAge
	ch <- c.leaseAge
	ch <- c.members
	ch <- c.seenAge
}

// Collect implements prometheus.Collector: it reports the calls counted
// so far, and reads the watched partitions' status and tasks' stats (see
// Watch and WatchTask).
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.collectWatched(ch) // first: it counts scrape errors
	for _, v := range c.vecs() {
		v.Collect(ch)
	}
}

func (c *Collector) vecs() []prometheus.Collector {
	return []prometheus.Collector{c.calls, c.duration, c.rows, c.cells, c.bytes, c.roundTrips, c.retries, c.scrapeErrs}
}
