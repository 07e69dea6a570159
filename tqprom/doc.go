// Package tqprom exports the calls and queues of tq clients as Prometheus
// metrics. It is a module of its own, so that programs that do not import
// it never download client_golang.
//
// A Collector is both a tq.Tracer, which counts every call of the clients
// that trace through it, and a prometheus.Collector, which reports those
// counts and, at each scrape, the state of the partitions and tasks the
// caller asked it to watch:
//
//	col, err := tqprom.New()
//	if err != nil { ... }
//	if err := col.Register(prometheus.DefaultRegisterer); err != nil { ... }
//	c, err := tq.Open(ctx, url, tq.WithTracer(col))
//	...
//	err = col.Watch(c, "step-3", "reward", "train") // and col.Unwatch("step-3") when the step is done
//	err = col.WatchTask(rewardTask)                 // its staleness counts
//	err = col.WatchPresence(c, "rollout", "reward") // the processes of each role
//
// # Metrics
//
// Calls (counted as they end; a call a scrape makes is not counted):
//
//	tq_calls_total{op,class}             counter: calls; errors are the class!="ok" ones
//	tq_call_duration_seconds{op}         histogram: how long calls took, in seconds (a Wait's time includes its wait)
//	tq_call_rows_total{op}               counter: rows written, read, listed, looked up, cleared, leased or settled
//	tq_call_cells_total{op}              counter: cells (row, field) written, read or deleted
//	tq_call_bytes_total{op}              counter: bytes of the cells written or read
//	tq_call_round_trips_total{op}        counter: requests to the engine's servers (0 in process)
//	tq_call_retries_total{op}            counter: requests made again after the server was unavailable
//
// op is the tq.Client or tq.Task method ("BatchPut", "Claim", "Ack" ...:
// see tq.Call), or "other" for one this package does not know; class is
// the outcome, see ErrorClass. The counts of a failed call are what it
// did before failing.
//
// Watched partitions and tasks (read at each scrape):
//
//	tq_partition_rows{partition}             gauge: committed rows (Watch)
//	tq_task_rows{partition,task,state}       gauge: a task's rows in state ready, waiting, leased,
//	                                         acked, dead or dropped, as tq.Client.Status counts them (Watch)
//	tq_task_redelivered_rows{partition,task} gauge: rows ready or leased that were delivered before
//	                                         without an ack, and may have been processed once (Watch)
//	tq_task_dead_lease_ended_rows{partition,task}  gauge: dead rows whose last lease ended unsettled
//	                                         (a consumer too slow, or gone); the other dead rows died of
//	                                         an error, whose text is no label (unbounded): tq dead (Watch)
//	tq_task_leases{partition,task}           gauge: running leases, each held by one consumer (Watch)
//	tq_task_lease_remaining_seconds{partition,task}  gauge: until the earliest running lease ends
//	                                         unless extended; absent with none (Watch)
//	tq_task_oldest_lease_age_seconds{partition,task}  gauge: since the oldest running lease was
//	                                         granted (tq.LeaseStatus.Granted); 0 with none (Watch)
//	tq_task_oldest_ready_age_seconds{partition,task}  gauge: lag, since the oldest ready row became
//	                                         ready (tq.TaskStatus.OldestReady; ready as Status counts it,
//	                                         rows waiting for a field included); 0 with none (Watch)
//	tq_task_consumed_rows_total{partition,task}  counter: rows the task ever acked or dropped,
//	                                         rows cleared since included (tq.TaskStatus.Consumed) (Watch)
//	tq_claim_skipped_rows_total{partition,task}  counter: stale rows the task's claims passed over (WatchTask)
//	tq_claim_dropped_rows_total{partition,task}  counter: rows its claims dropped (WatchTask)
//	tq_engine_connections{state}             gauge: the watched clients' engines' connections, busy
//	                                         or idle (absent for an in-process engine)
//	tq_engine_connection_timeouts_total      counter: requests that gave up waiting for a free connection
//	tq_scrape_errors_total{partition}        counter: scrapes whose Status call for the partition
//	                                         failed or timed out; its gauges are absent from those scrapes
//	                                         (partition "tq.presence": a failed Members read)
//
// Watched presence groups (tq.Client.Announce; read at each scrape):
//
//	tq_presence_members{group,state}         gauge: members by state: alive, gone (not seen for
//	                                         three intervals) or left (closed its presence)
//	tq_presence_last_seen_age_seconds{group} gauge: since the least recently seen member that has
//	                                         not left renewed its presence; 0 with none
//
// A lease's age counts from its claim (tq.LeaseStatus.Granted). A lease
// whose grant time the engine does not know (one in a log written before
// grant times were kept) counts from the first scrape that saw it: the
// collector remembers that scrape per running lease (by
// tq.LeaseStatus.ID). The consumed counter goes down only
// when the partition is cleared whole (ClearPartition), which Prometheus
// takes for a counter reset.
//
// # Cardinality
//
// Label values never come from keys or data. op takes one of 31 values
// and class one of 11, so tq_calls_total has at most 341 series, each
// other call counter 31, and the histogram 22 per op with the default
// buckets (19 bounds, +Inf, sum and count). partition, task and group
// take only the values the caller watched: at most WithWatchLimit label
// sets (default 256), each watched partition counting one (its 2
// series), each task named to Watch one (its 6 states, its redelivered
// rows, its dead rows of a lease's end, its 2 lease counts, its 2 ages
// and its consumed rows: 13 series), each (partition, task) given to
// WatchTask one (2 series), and each presence group one (its 3 states and
// its last seen age: 4 series); so watches add at most 13×256 series by
// default, and one
// scrape error series for presence. Member names and lease IDs are never
// labels. A Watch, WatchTask or WatchPresence past the limit fails with
// ErrWatchLimit, changing nothing; Unwatch, UnwatchTask and
// UnwatchPresence free label sets and delete their series.
//
// # Scrapes
//
// A scrape calls Status once per watched partition and Members once per
// client of watched presence groups, up to 8 at a time,
// all within WithScrapeTimeout (default 5s); what has not answered by then
// is left out of that scrape and counted in tq_scrape_errors_total. The
// scrape's goroutines end before it returns.
package tqprom
