package tqprom_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tqgo/tqgo/tqprom"
)

// Every metric the dashboard's queries name is one the collector exports
// (a histogram by its _bucket, _sum or _count series), and every label
// they group or match by is one of its labels, so the dashboard cannot
// drift from the code.
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
			if strings.Contains(v, "tq_") {
				exprs = append(exprs, v)
			}
		}
	})
	if len(exprs) < 10 {
		t.Fatalf("found %d expressions in dashboard.json: the walk is broken", len(exprs))
	}

	col, err := tqprom.New()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]bool{}
	for _, name := range exported(t, col) {
		series[name] = true
	}
	series["tq_call_duration_seconds_bucket"] = true
	series["tq_call_duration_seconds_sum"] = true
	series["tq_call_duration_seconds_count"] = true
	delete(series, "tq_call_duration_seconds") // a histogram is queried by its series
	labels := []string{"op", "class", "partition", "task", "state", "le"}

	used := map[string]bool{}
	for _, e := range exprs {
		for _, name := range metricName.FindAllString(e, -1) {
			used[name] = true
			if !series[name] {
				t.Errorf("dashboard query %q names %s, which tqprom does not export", e, name)
			}
		}
		for _, m := range labelName.FindAllStringSubmatch(e, -1) {
			for l := range strings.SplitSeq(m[1], ",") {
				if l = strings.TrimSpace(l); l != "" && !slices.Contains(labels, l) {
					t.Errorf("dashboard query %q groups by %q, not a tqprom label", e, l)
				}
			}
		}
		for _, m := range matcher.FindAllStringSubmatch(e, -1) {
			if !slices.Contains(labels, m[1]) {
				t.Errorf("dashboard query %q matches label %q, not a tqprom label", e, m[1])
			}
		}
		if strings.Contains(e, "label_values(") {
			if m := labelValues.FindStringSubmatch(e); m == nil || !slices.Contains(labels, m[1]) {
				t.Errorf("dashboard variable %q: not label_values of a tqprom label", e)
			}
		}
	}
	for _, name := range []string{"tq_calls_total", "tq_call_duration_seconds_bucket", "tq_task_rows", "tq_claim_dropped_rows_total"} {
		if !used[name] {
			t.Errorf("the dashboard does not show %s", name)
		}
	}
}

var (
	metricName  = regexp.MustCompile(`\btq_[a-z_]+\b`)
	labelName   = regexp.MustCompile(`\bby \(([^)]*)\)`)
	matcher     = regexp.MustCompile(`[{,]\s*([a-zA-Z_]+)\s*(?:=~|!~|!=|=)`)
	labelValues = regexp.MustCompile(`label_values\([^,]*,\s*([a-zA-Z_]+)\)`)
)

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
