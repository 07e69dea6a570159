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
//	tq_task_leases{partition,task}           gauge: running leases, each held by one consumer (Watch)
//	tq_task_lease_remaining_seconds{partition,task}  gauge: until the earliest running lease ends
//	                                         unless extended; absent with none (Watch)
//	tq_claim_skipped_rows_total{partition,task}  counter: stale rows the task's claims passed over (WatchTask)
//	tq_claim_dropped_rows_total{partition,task}  counter: rows its claims dropped (WatchTask)
//	tq_engine_connections{state}             gauge: the watched clients' engines' connections, busy
//	                                         or idle (absent for an in-process engine)
//	tq_engine_connection_timeouts_total      counter: requests that gave up waiting for a free connection
//	tq_scrape_errors_total{partition}        counter: scrapes whose Status call for the partition
//	                                         failed or timed out; its gauges are absent from those scrapes
//
// Not exported, for want of a tq API that tells them: the age of the
// oldest ready row, and the age of leases (tq.LeaseStatus tells when a
// lease ends, not when it began: tq_task_lease_remaining_seconds stands
// for it).
//
// # Cardinality
//
// Label values never come from keys or data. op takes one of 24 values
// and class one of 11, so tq_calls_total has at most 264 series, each
// other call counter 24, and the histogram 24 per op with the default
// buckets (19 bounds, +Inf, sum and count). partition and task take only
// the values the caller watched: at most WithWatchLimit label sets
// (default 256), each watched partition counting one (its 2 series), each
// task named to Watch one (its 6 states, its redelivered rows and its 2
// lease series), each
// (partition, task) given to WatchTask one (2 series); so watches add at
// most 9×256 series by default. A Watch or WatchTask past the limit fails with ErrWatchLimit,
// changing nothing; Unwatch and UnwatchTask free label sets and delete
// their series.
//
// # Scrapes
//
// A scrape calls Status once per watched partition, up to 8 at a time,
// all within WithScrapeTimeout (default 5s); what has not answered by then
// is left out of that scrape and counted in tq_scrape_errors_total. The
// scrape's goroutines end before it returns.
package tqprom
