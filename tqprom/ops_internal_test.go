package tqprom

import (
	"go/ast"
	"go/parser"
	"go/token"
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
	tracers := map[string]bool{"trace": true, "claim": true, "settle": true, "consumption": true, "view": true, "mark": true, "awaitRatio": true}
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
