package tqprom

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Every op tq traces has its own op label value, so that none falls into
// "other": this reads tq's source for the names its calls trace under (the
// string passed to trace, or to the helpers that pass it on).
func TestOpsAreTqs(t *testing.T) {
	files, err := filepath.Glob("../tq/*.go")
	if err != nil {
		t.Fatal(err)
	}
	tracers := map[string]bool{"trace": true, "claim": true, "settle": true, "consumption": true, "view": true, "summary": true, "mark": true, "awaitRatio": true}
	traced := map[string]bool{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) < 2 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || !tracers[sel.Sel.Name] {
				return true
			}
			if lit, ok := call.Args[1].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if op, err := strconv.Unquote(lit.Value); err == nil {
					traced[op] = true
				}
			}
			return true
		})
	}
	if len(traced) < 15 {
		t.Fatalf("found %d traced ops in ../tq, %v: the search is broken", len(traced), traced)
	}
	for op := range traced {
		if !slices.Contains(ops, op) {
			t.Errorf("tq traces op %q, which this package counts as %q: add it to ops", op, opOther)
		}
	}
	for _, op := range ops {
		if op != opOther && !traced[op] {
			t.Errorf("ops has %q, which tq no longer traces", op)
		}
	}
}

// The package doc's counts of op values and call series are the code's.
func TestDocCardinality(t *testing.T) {
	raw, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(strings.ReplaceAll(string(raw), "//", " ")), " ")
	nClasses := len(classes) + 2 // ok and other besides the sentinels'
	for _, want := range []string{
		fmt.Sprintf("op takes one of %d values and class one of %d", len(ops), nClasses),
		fmt.Sprintf("tq_calls_total has at most %d series, each other call counter %d", len(ops)*nClasses, len(ops)),
		fmt.Sprintf("the histogram %d per op with the default buckets (%d bounds, +Inf, sum and count)", len(DefaultBuckets)+3, len(DefaultBuckets)),
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("the package doc does not say %q", want)
		}
	}
}
