package tqprom_test

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	dto "github.com/prometheus/client_model/go"

	"github.com/tqgo/tqgo/tq"
)

// Every metric the dashboard's queries name is one a collector exports
// once it has watched a partition, a task and a presence group with data
// (a histogram by its _bucket, _sum or _count series), not merely one it
// describes; every label a query matches or groups by is a label of the
// metrics it queries; and a query over per-task (per-group) series keeps
// the task (group) in every aggregation, so that roles are never summed
// together. Metric names are read by tokenizing each PromQL expression,
// not by a pattern of names, so that a name of any spelling is checked.
func TestDashboardMetricsExist(t *testing.T) {
	raw, err := os.ReadFile("dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	var exprs []string
	walk(dash, func(key string, v string) {
		switch key {
		case "expr", "definition":
			exprs = append(exprs, v)
		case "query":
			if strings.Contains(v, "(") { // a PromQL query, not a data source type
				exprs = append(exprs, v)
			}
		}
	})
	if len(exprs) < 10 {
		t.Fatalf("found %d expressions in dashboard.json: the walk is broken", len(exprs))
	}

	labelsOf := exportedWithData(t)
	used := map[string]bool{}
	for _, e := range exprs {
		q, err := parseQuery(e)
		if err != nil {
			t.Errorf("dashboard query %q: %v", e, err)
			continue
		}
		if len(q.metrics) == 0 {
			t.Errorf("dashboard query %q names no metric", e)
		}
		known := map[string]bool{}
		for _, name := range q.metrics {
			used[name] = true
			ls, ok := labelsOf[name]
			if !ok {
				t.Errorf("dashboard query %q names %s, which tqprom does not export", e, name)
				continue
			}
			for _, l := range ls {
				known[l] = true
			}
		}
		for _, l := range q.labels {
			if !known[l] {
				t.Errorf("dashboard query %q uses label %q, which none of its metrics has", e, l)
			}
		}
		for _, role := range []string{"task", "group"} {
			if !known[role] {
				continue
			}
			for _, agg := range q.aggs {
				if !slices.Contains(agg.by, role) {
					t.Errorf("dashboard query %q: %s by (%s) sums series of different %ss together: group by %s", e, agg.op, strings.Join(agg.by, ", "), role, role)
				}
			}
		}
	}
	for _, name := range []string{
		"tq_calls_total", "tq_call_duration_seconds_bucket", "tq_task_rows", "tq_claim_dropped_rows_total",
		"tq_task_consumed_rows_total", "tq_task_oldest_ready_age_seconds", "tq_task_oldest_lease_age_seconds",
		"tq_task_leases", "tq_task_lease_remaining_seconds", "tq_presence_members", "tq_presence_last_seen_age_seconds",
	} {
		if !used[name] {
			t.Errorf("the dashboard does not show %s", name)
		}
	}
}

// exportedWithData returns the series names a collector exports, each
// with its labels, once it has counted calls and watched a partition, a
// task with a lease, acked and ready rows, and a presence group with a
// member: a histogram as its _bucket (with le), _sum and _count series.
func exportedWithData(t *testing.T) map[string][]string {
	t.Helper()
	col, reg, c := setup(t)
	ctx := t.Context()
	putRows(t, c, "p", 4, 0)
	task, err := c.Task("p", "t", []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := task.Claim(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := task.Claim(ctx, 1); err != nil {
		t.Fatal(err)
	}
	pres, err := c.Announce(ctx, "rollout", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pres.Close() })
	if err := col.Watch(c, "p", "t"); err != nil {
		t.Fatal(err)
	}
	if err := col.WatchTask(task); err != nil {
		t.Fatal(err)
	}
	if err := col.WatchPresence(c, "rollout"); err != nil {
		t.Fatal(err)
	}
	closed, err := tq.Open(ctx, "memory://")
	if err != nil {
		t.Fatal(err)
	}
	_ = closed.Close()
	if err := col.Watch(closed, "q"); err != nil { // its scrapes fail: tq_scrape_errors_total
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, f := range fams {
		var labels []string
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if !slices.Contains(labels, lp.GetName()) {
					labels = append(labels, lp.GetName())
				}
			}
		}
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			out[f.GetName()+"_bucket"] = append(slices.Clone(labels), "le")
			out[f.GetName()+"_sum"] = labels
			out[f.GetName()+"_count"] = labels
		case dto.MetricType_SUMMARY:
			out[f.GetName()] = append(slices.Clone(labels), "quantile")
			out[f.GetName()+"_sum"] = labels
			out[f.GetName()+"_count"] = labels
		default:
			out[f.GetName()] = labels
		}
	}
	return out
}

// A query as the test reads it: the metrics it selects, the labels it
// matches or groups by, and its aggregations with their grouping.
type query struct {
	metrics []string
	labels  []string
	aggs    []aggregation
}

type aggregation struct {
	op string
	by []string // nil: no by clause (everything summed together)
}

// aggregators are PromQL's aggregation operators.
var aggregators = []string{"sum", "avg", "min", "max", "count", "group", "stddev", "stdvar", "topk", "bottomk", "quantile", "count_values", "limitk", "limit_ratio"}

// keywords are PromQL words that are neither metrics nor functions.
var keywords = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset", "atan2", "inf", "nan"}

// parseQuery tokenizes a PromQL expression (or a Grafana label_values
// query) and reads what TestDashboardMetricsExist checks. It knows
// enough PromQL for a dashboard: selectors with matchers, range
// selectors, function calls, aggregations with by before or after their
// argument, binary operators, strings, numbers, durations and Grafana's
// $variables.
func parseQuery(e string) (query, error) {
	toks, err := tokenize(e)
	if err != nil {
		return query{}, err
	}
	var q query
	addLabel := func(l string) {
		if !slices.Contains(q.labels, l) {
			q.labels = append(q.labels, l)
		}
	}
	// groupList reads "( a, b )" at toks[i]; it returns the names and
	// the index past it.
	groupList := func(i int) ([]string, int) {
		if i >= len(toks) || toks[i] != "(" {
			return nil, i
		}
		by := []string{}
		for i++; i < len(toks) && toks[i] != ")"; i++ {
			if toks[i] != "," {
				by = append(by, toks[i])
			}
		}
		return by, i + 1
	}
	// closing returns the index of the ")" matching the "(" at toks[i].
	closing := func(i int) int {
		depth := 0
		for ; i < len(toks); i++ {
			switch toks[i] {
			case "(":
				depth++
			case ")":
				depth--
				if depth == 0 {
					return i
				}
			}
		}
		return len(toks)
	}
	for i := 0; i < len(toks); i++ {
		tok := toks[i]
		switch {
		case tok == "{":
			// Matchers: label op string, ...
			for i++; i < len(toks) && toks[i] != "}"; i++ {
				if isIdent(toks[i]) && i+1 < len(toks) && strings.ContainsAny(toks[i+1], "=~!") {
					addLabel(toks[i])
				}
			}
		case tok == "[":
			for i < len(toks) && toks[i] != "]" {
				i++
			}
		case tok == "by" || tok == "without" || tok == "on" || tok == "ignoring" || tok == "group_left" || tok == "group_right":
			ls, next := groupList(i + 1)
			for _, l := range ls {
				addLabel(l)
			}
			i = next - 1
		case slices.Contains(aggregators, tok) && i+1 < len(toks) && (toks[i+1] == "(" || toks[i+1] == "by" || toks[i+1] == "without"):
			agg := aggregation{op: tok}
			j := i + 1
			if toks[j] == "by" || toks[j] == "without" {
				ls, next := groupList(j + 1)
				if toks[j] == "by" {
					agg.by = ls
				} else {
					agg.by = []string{"(without)"} // keeps the others: not checked here
				}
				j = next
			}
			end := closing(j)
			if agg.by == nil && end+1 < len(toks) && (toks[end+1] == "by" || toks[end+1] == "without") {
				ls, _ := groupList(end + 2)
				if toks[end+1] == "by" {
					agg.by = ls
				} else {
					agg.by = []string{"(without)"}
				}
			}
			if agg.by == nil {
				agg.by = []string{}
			}
			q.aggs = append(q.aggs, agg)
		case tok == "label_values":
			// label_values(metric{...}, label) or label_values(label).
			end := closing(i + 1)
			if end >= 2 && toks[end-2] == "," && isIdent(toks[end-1]) {
				addLabel(toks[end-1])
			}
		case isIdent(tok) && !slices.Contains(keywords, tok):
			if i+1 < len(toks) && toks[i+1] == "(" {
				continue // a function
			}
			if i > 0 && toks[i-1] == "," && i+1 < len(toks) && toks[i+1] == ")" && slices.Contains(toks[:i], "label_values") {
				continue // label_values's label, read above
			}
			if !slices.Contains(q.metrics, tok) {
				q.metrics = append(q.metrics, tok)
			}
		}
	}
	return q, nil
}

// tokenize splits e into identifiers, numbers, strings (kept quoted),
// operators and brackets; a Grafana variable ($name, ${name}) becomes
// the token "$".
func tokenize(e string) ([]string, error) {
	var toks []string
	r := []rune(e)
	for i := 0; i < len(r); {
		c := r[i]
		switch {
		case unicode.IsSpace(c):
			i++
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(r) && r[j] != c {
				if r[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(r) {
				return nil, fmt.Errorf("unterminated string at %d", i)
			}
			toks = append(toks, string(r[i:j+1]))
			i = j + 1
		case c == '$':
			j := i + 1
			if j < len(r) && r[j] == '{' {
				for j < len(r) && r[j] != '}' {
					j++
				}
				j++
			} else {
				for j < len(r) && (r[j] == '_' || unicode.IsLetter(r[j]) || unicode.IsDigit(r[j])) {
					j++
				}
			}
			toks = append(toks, "$")
			i = j
		case c == '_' || c == ':' || unicode.IsLetter(c):
			j := i
			for j < len(r) && (r[j] == '_' || r[j] == ':' || unicode.IsLetter(r[j]) || unicode.IsDigit(r[j])) {
				j++
			}
			toks = append(toks, string(r[i:j]))
			i = j
		case unicode.IsDigit(c) || c == '.':
			j := i
			for j < len(r) && (unicode.IsDigit(r[j]) || unicode.IsLetter(r[j]) || r[j] == '.') {
				j++ // numbers, 1e-3, durations like 5m
			}
			toks = append(toks, string(r[i:j]))
			i = j
		case strings.ContainsRune("=!~<>", c):
			j := i + 1
			if j < len(r) && strings.ContainsRune("=~", r[j]) {
				j++
			}
			toks = append(toks, string(r[i:j]))
			i = j
		case strings.ContainsRune("(){}[],+-*/%^@", c):
			toks = append(toks, string(c))
			i++
		default:
			return nil, fmt.Errorf("unexpected %q at %d", c, i)
		}
	}
	return toks, nil
}

func isIdent(tok string) bool {
	return tok != "" && (tok[0] == '_' || tok[0] == ':' || unicode.IsLetter(rune(tok[0])))
}

// walk calls f with every string value in v and the key it is under.
func walk(v any, f func(key, s string)) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok {
				f(k, s)
			} else {
				walk(x, f)
			}
		}
	case []any:
		for _, x := range v {
			walk(x, f)
		}
	}
}

// The parser is held to queries whose names it must find, and to those
// that sum roles together.
func TestParseQuery(t *testing.T) {
	for _, c := range []struct {
		expr    string
		metrics []string
		labels  []string
		aggs    int
		noBy    bool
	}{
		{`sum by (op) (rate(tq_calls_total[$__rate_interval]))`, []string{"tq_calls_total"}, []string{"op"}, 1, false},
		{`histogram_quantile(0.99, sum by (op, le) (rate(tq_call_duration_seconds_bucket[5m])))`, []string{"tq_call_duration_seconds_bucket"}, []string{"op", "le"}, 1, false},
		{`sum(tq_task_rows{state="ready", task=~"$task"})`, []string{"tq_task_rows"}, []string{"state", "task"}, 1, true},
		{`sum(rate(tq_acked_rows_total[1m])) by (task) / on (task) group_left tq_x2`, []string{"tq_acked_rows_total", "tq_x2"}, []string{"task"}, 1, false},
		{`up{job="tq"} == 0 and process_start_time_seconds offset 1h`, []string{"up", "process_start_time_seconds"}, []string{"job"}, 0, false},
		{`label_values(tq_task_rows{partition=~"$partition"}, task)`, []string{"tq_task_rows"}, []string{"partition", "task"}, 0, false},
	} {
		q, err := parseQuery(c.expr)
		if err != nil {
			t.Errorf("%s: %v", c.expr, err)
			continue
		}
		if !slices.Equal(q.metrics, c.metrics) {
			t.Errorf("%s: metrics %v, want %v", c.expr, q.metrics, c.metrics)
		}
		for _, l := range c.labels {
			if !slices.Contains(q.labels, l) {
				t.Errorf("%s: labels %v, want %s among them", c.expr, q.labels, l)
			}
		}
		if len(q.aggs) != c.aggs {
			t.Errorf("%s: %d aggregations, want %d", c.expr, len(q.aggs), c.aggs)
		} else if c.aggs > 0 && (len(q.aggs[0].by) == 0) != c.noBy {
			t.Errorf("%s: aggregation %+v", c.expr, q.aggs[0])
		}
	}
}
