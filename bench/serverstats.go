package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// What a Redis server spent on a measure: INFO commandstats (calls and
// microseconds per command) and INFO cpu (the main thread's user and
// system time) read before and after the timed part of each call of an
// arm, the deltas summed per repetition.
//
// Redis counts a command a script or a MULTI/EXEC ran twice: under its own
// name, and inside the EVALSHA or EXEC that ran it. The commands a client
// sent are told from those by a MONITOR session over the arm's first call
// (its warm-up, not one of the repetitions): MONITOR shows a script's
// commands from "lua" and a transaction's between MULTI and EXEC, so it
// gives, per command name, the share of the calls that clients sent; a
// repetition's command time is each command's microseconds times that
// share. A command the probe did not see counts in full.

// cmdStat is one commandstats line.
type cmdStat struct{ calls, usec float64 }

// serverSnap is one INFO cpu commandstats reply.
type serverSnap struct {
	cpu  float64            // main thread, user + system, seconds
	cmds map[string]cmdStat // by commandstats name: "evalsha", "client|setinfo"
}

func snapServer(ctx context.Context, c *redis.Client) (serverSnap, error) {
	info, err := c.Info(ctx, "cpu", "commandstats").Result()
	if err != nil {
		return serverSnap{}, err
	}
	s := serverSnap{cmds: map[string]cmdStat{}}
	for line := range strings.SplitSeq(info, "\n") {
		line = strings.TrimSpace(line)
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case k == "used_cpu_user_main_thread" || k == "used_cpu_sys_main_thread":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return serverSnap{}, fmt.Errorf("INFO %s: %w", k, err)
			}
			s.cpu += f
		case strings.HasPrefix(k, "cmdstat_"):
			var st cmdStat
			for f := range strings.SplitSeq(v, ",") {
				fk, fv, _ := strings.Cut(f, "=")
				switch fk {
				case "calls":
					st.calls, _ = strconv.ParseFloat(fv, 64)
				case "usec":
					st.usec, _ = strconv.ParseFloat(fv, 64)
				}
			}
			s.cmds[strings.TrimPrefix(k, "cmdstat_")] = st
		}
	}
	return s, nil
}

// serverWindow is what the server did between two snapshots, INFO's own
// calls left out.
type serverWindow struct {
	cpu  float64
	cmds map[string]cmdStat
	ops  int // the measure's operations in the window (claims, reads)
}

func (b serverSnap) delta(a serverSnap, ops int) serverWindow {
	w := serverWindow{cpu: b.cpu - a.cpu, cmds: map[string]cmdStat{}, ops: ops}
	for k, s := range b.cmds {
		if k == "info" {
			continue
		}
		d := cmdStat{s.calls - a.cmds[k].calls, s.usec - a.cmds[k].usec}
		if d.calls > 0 || d.usec > 0 {
			w.cmds[k] = d
		}
	}
	return w
}

// serverMeter records the server's work in the timed part of each call of
// one arm. A nil serverMeter (an engine that is not Redis) records nothing.
type serverMeter struct {
	info  *redis.Client  // reads INFO, and ends the MONITOR probe
	opts  *redis.Options // where the MONITOR probe connects
	probe bool           // split commandstats by a MONITOR probe of the first call

	mu       sync.Mutex
	share    map[string]float64 // sent share by command name; nil before the probe
	probeErr error
	windows  []serverWindow
}

func newServerMeter(info *redis.Client, opts *redis.Options, probe bool) *serverMeter {
	return &serverMeter{info: info, opts: opts, probe: probe}
}

// serverSpan is one window being recorded.
type serverSpan struct {
	m   *serverMeter
	at  serverSnap
	mon *monitor
}

// begin starts a window: call it right before the timed part.
func (m *serverMeter) begin(ctx context.Context) (*serverSpan, error) {
	if m == nil {
		return nil, nil
	}
	sp := &serverSpan{m: m}
	m.mu.Lock()
	first := m.probe && m.share == nil && m.probeErr == nil
	m.mu.Unlock()
	if first {
		mon, err := startMonitor(ctx, m.opts, m.info)
		if err != nil {
			m.mu.Lock()
			m.probeErr = err
			m.mu.Unlock()
		}
		sp.mon = mon
	}
	var err error
	sp.at, err = snapServer(ctx, m.info)
	return sp, err
}

// end closes the window, in which the measure did ops operations.
func (sp *serverSpan) end(ctx context.Context, ops int) error {
	if sp == nil {
		return nil
	}
	now, err := snapServer(ctx, sp.m.info)
	if err != nil {
		return err
	}
	m := sp.m
	var share map[string]float64
	if sp.mon != nil {
		share, err = sp.mon.stop(ctx)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.windows = append(m.windows, now.delta(sp.at, ops))
	if sp.mon != nil {
		if err != nil {
			m.probeErr = err
		} else {
			m.share = share
		}
	}
	return nil
}

// serverRep is one repetition's server work per operation.
type serverRep struct {
	cmd float64            // command seconds per op: the commands clients sent
	cpu float64            // main-thread CPU seconds per op
	per map[string]cmdStat // per command: calls and usec per call (as sent)
}

// reps cuts the windows of the last reps samples of an arm that ran iters
// calls per sample (the calibration's windows come first and are left
// out) into one serverRep each.
func (m *serverMeter) reps(reps, iters int) []serverRep {
	if m == nil || len(m.windows) < reps*iters {
		return nil
	}
	ws := m.windows[len(m.windows)-reps*iters:]
	out := make([]serverRep, reps)
	for r := range out {
		var usec, cpu float64
		var ops int
		per := map[string]cmdStat{}
		for _, w := range ws[r*iters : (r+1)*iters] {
			cpu += w.cpu
			ops += w.ops
			for k, s := range w.cmds {
				f := m.sentShare(k)
				usec += s.usec * f
				p := per[k]
				p.calls += s.calls * f
				p.usec += s.usec * f
				per[k] = p
			}
		}
		o := float64(max(ops, 1))
		out[r] = serverRep{cmd: usec / o / 1e6, cpu: cpu / o, per: per}
		for k, p := range per {
			if p.calls < 0.5 {
				delete(per, k)
				continue
			}
			per[k] = cmdStat{calls: p.calls / o, usec: p.usec / p.calls}
		}
	}
	return out
}

// sentShare is the share of a command's calls that clients sent.
func (m *serverMeter) sentShare(name string) float64 {
	if m.share == nil {
		return 1
	}
	base, _, _ := strings.Cut(name, "|")
	if f, ok := m.share[base]; ok {
		return f
	}
	return 1
}

// note says how the command time was split, for the table's notes.
func (m *serverMeter) note() string {
	if m == nil || !m.probe {
		return ""
	}
	if m.probeErr != nil {
		return fmt.Sprintf("the MONITOR probe failed (%v): commands run by scripts are counted twice", m.probeErr)
	}
	return ""
}

// monitor is a MONITOR session counting, per command, the calls clients
// sent and those a script or a transaction ran.
type monitor struct {
	conn   net.Conn
	marker string
	info   *redis.Client
	done   chan error
	sent   map[string]float64
	inner  map[string]float64
}

var monitorSeq struct {
	sync.Mutex
	n int
}

func startMonitor(ctx context.Context, opts *redis.Options, info *redis.Client) (*monitor, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", opts.Addr)
	if err != nil {
		return nil, err
	}
	if opts.TLSConfig != nil {
		conn = tls.Client(conn, opts.TLSConfig)
	}
	rd := bufio.NewReader(conn)
	send := func(args ...string) (string, error) {
		var b strings.Builder
		fmt.Fprintf(&b, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
		if _, err := conn.Write([]byte(b.String())); err != nil {
			return "", err
		}
		line, err := rd.ReadString('\n')
		if err == nil && !strings.HasPrefix(line, "+") {
			err = fmt.Errorf("%s", strings.TrimSpace(line))
		}
		return line, err
	}
	fail := func(err error) (*monitor, error) {
		conn.Close()
		return nil, fmt.Errorf("MONITOR: %w", err)
	}
	if opts.Password != "" {
		args := []string{"AUTH", opts.Password}
		if opts.Username != "" {
			args = []string{"AUTH", opts.Username, opts.Password}
		}
		if _, err := send(args...); err != nil {
			return fail(err)
		}
	}
	if _, err := send("MONITOR"); err != nil {
		return fail(err)
	}
	monitorSeq.Lock()
	monitorSeq.n++
	seq := monitorSeq.n
	monitorSeq.Unlock()
	m := &monitor{conn: conn, info: info, done: make(chan error, 1),
		marker: fmt.Sprintf("tqgo-bench-monitor-end-%d", seq),
		sent:   map[string]float64{}, inner: map[string]float64{}}
	go m.read(rd)
	return m, nil
}

// read counts the session's lines until the marker, which stop sends.
func (m *monitor) read(rd *bufio.Reader) {
	inMulti := map[string]bool{}
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			m.done <- err
			return
		}
		// +1796182365.323533 [0 127.0.0.1:34856] "SET" "a" "b"
		_, rest, ok := strings.Cut(line, " [")
		if !ok {
			continue
		}
		who, rest, ok := strings.Cut(rest, "] ")
		if !ok {
			continue
		}
		_, client, _ := strings.Cut(who, " ")
		fields := strings.SplitN(rest, `"`, 3)
		if len(fields) < 3 {
			continue
		}
		cmd := strings.ToLower(fields[1])
		if cmd == "echo" && strings.Contains(rest, m.marker) {
			m.done <- nil
			return
		}
		switch {
		case client == "lua":
			m.inner[cmd]++
		case cmd == "multi":
			inMulti[client] = true
			m.sent[cmd]++
		case inMulti[client] && (cmd == "exec" || cmd == "discard"):
			inMulti[client] = false
			m.sent[cmd]++
		case inMulti[client]:
			m.inner[cmd]++
		default:
			m.sent[cmd]++
		}
	}
}

// stop ends the session once it has seen every command sent before, and
// returns the share of each command's calls that clients sent.
func (m *monitor) stop(ctx context.Context) (map[string]float64, error) {
	defer m.conn.Close()
	if err := m.info.Echo(ctx, m.marker).Err(); err != nil {
		return nil, err
	}
	select {
	case err := <-m.done:
		if err != nil {
			return nil, fmt.Errorf("MONITOR: %w", err)
		}
	case <-time.After(30 * time.Second):
		return nil, fmt.Errorf("MONITOR: the end marker did not come back")
	}
	share := map[string]float64{}
	for k, n := range m.sent {
		share[k] = n / (n + m.inner[k])
	}
	for k := range m.inner {
		if _, ok := share[k]; !ok {
			share[k] = 0
		}
	}
	return share, nil
}

// fmtCmds lists the commands clients sent per operation, the most called
// first: "evalsha 2.00 × 410 µs".
func fmtCmds(per map[string]cmdStat) string {
	names := make([]string, 0, len(per))
	for k := range per {
		names = append(names, k)
	}
	slices.SortFunc(names, func(a, b string) int {
		if per[a].calls != per[b].calls {
			if per[a].calls > per[b].calls {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range names {
		p := per[k]
		parts = append(parts, fmt.Sprintf("%s %s × %s", k, sig3(p.calls), fmtMicros(p.usec)))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// fmtMicros prints microseconds as a time.
func fmtMicros(usec float64) string {
	sec := usec / 1e6
	scale, unit := timeUnit(sec)
	return sig3(sec*scale) + " " + unit
}

// serverRow pairs a tq measure's server work with its Streams limit's.
type serverRow struct {
	measure string
	a       *arm
	am      *serverMeter
	limName string
	lim     *arm
	lm      *serverMeter
}

func serverTable(cfg Config) *Table {
	return &Table{
		ID:    "queue-server",
		Title: "Queue: Redis server time per claim",
		Intro: fmt.Sprintf("Redis only. INFO commandstats and INFO cpu are read right before and right after the timed part of every "+
			"call of the claim measures above and of their Streams limits (outside the timing); a repetition's deltas are summed over "+
			"its calls and divided by its claims (a Claim with the Ack of its lease; in contention, the claims that returned rows) or "+
			"by the limit's reads (an XREADGROUP with the XACK of what it read; in contention, the reads that returned entries). "+
			"command time: the commandstats usec of every command the clients sent (INFO's left out), which is the server's wall "+
			"time in the command (on two shared cores a descheduled server thread counts too, so it can exceed the CPU). Redis "+
			"counts a command that a script or a MULTI/EXEC ran both under its own name and inside the EVALSHA or EXEC that ran it; "+
			"it is counted once, inside: which calls those are is learned per command name from a MONITOR session over the "+
			"measure's first call (its warm-up, not timed). \"tq commands sent per claim\": calls per claim × time per call, "+
			"each the median of the repetitions. The limit cell gives XREADGROUP's and XACK's usec_per_call (medians). server "+
			"CPU: the main thread's user + system time (used_cpu_user_main_thread + used_cpu_sys_main_thread), commands plus "+
			"reading requests and writing replies (the first INFO's reply, a few µs, falls in the window). Median [min–max] of "+
			"the %d repetitions; the ratios are tq's over the limit's.", cfg.Reps),
		Header: []string{"engine", "measure", "tq command time per claim", "tq commands sent per claim", "limit",
			"limit command time per read", "ratio", "tq server CPU per claim", "limit server CPU per read", "CPU ratio"},
	}
}

// addServerRows summarises the server work of rows into tbl.
func addServerRows(cfg Config, t *target, rows []serverRow, tbl *Table, rep *Report) {
	for _, r := range rows {
		ar, lr := r.am.reps(cfg.Reps, r.a.iters), r.lm.reps(cfg.Reps, r.lim.iters)
		if ar == nil || lr == nil {
			continue
		}
		cmd, cpu := repDists(ar)
		lcmd, lcpu := repDists(lr)
		var xr, xa []float64
		for _, l := range lr {
			xr = append(xr, l.per["xreadgroup"].usec)
			xa = append(xa, l.per["xack"].usec)
		}
		verb, _, _ := strings.Cut(r.limName, " + ")
		lim := fmt.Sprintf("%s (%s per call) + XACK (%s per call)", verb, fmtMicros(summarize(xr).Median), fmtMicros(summarize(xa).Median))
		tbl.Rows = append(tbl.Rows, []string{t.name, r.measure, fmtTime(cmd), fmtCmds(medianPer(ar)), lim,
			fmtTime(lcmd), fmtRatio(cmd.Median / lcmd.Median), fmtTime(cpu), fmtTime(lcpu), fmtRatio(cpu.Median / lcpu.Median)})
		if n := r.am.note(); n != "" {
			tbl.Notes = append(tbl.Notes, fmt.Sprintf("%s %s: %s.", t.name, r.measure, n))
		}
		rep.Records = append(rep.Records,
			Record{Suite: "queue", Table: tbl.ID, Row: t.name, Series: r.measure + ": tq command time per claim", Unit: "s", Dist: cmd},
			Record{Suite: "queue", Table: tbl.ID, Row: t.name, Series: r.measure + ": tq server CPU per claim", Unit: "s", Dist: cpu},
			Record{Suite: "queue", Table: tbl.ID, Row: t.name, Series: r.measure + ": limit command time per read: " + r.limName, Unit: "s", Dist: lcmd},
			Record{Suite: "queue", Table: tbl.ID, Row: t.name, Series: r.measure + ": limit server CPU per read: " + r.limName, Unit: "s", Dist: lcpu})
	}
}

func repDists(rs []serverRep) (cmd, cpu Dist) {
	var a, b []float64
	for _, r := range rs {
		a = append(a, r.cmd)
		b = append(b, r.cpu)
	}
	return summarize(a), summarize(b)
}

// medianPer is, per command, the median over the repetitions of its
// calls per operation and of its time per call.
func medianPer(rs []serverRep) map[string]cmdStat {
	calls, usec := map[string][]float64{}, map[string][]float64{}
	for _, r := range rs {
		for k, p := range r.per {
			calls[k] = append(calls[k], p.calls)
			usec[k] = append(usec[k], p.usec)
		}
	}
	out := map[string]cmdStat{}
	for k, c := range calls {
		for len(c) < len(rs) {
			c = append(c, 0) // a repetition that did not send it
		}
		out[k] = cmdStat{calls: summarize(c).Median, usec: summarize(usec[k]).Median}
	}
	return out
}
