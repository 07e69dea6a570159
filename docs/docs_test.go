// Package docs holds tqgo's documentation pages (Markdown) and a test that
// keeps them navigable: every relative link of README.md and docs/*.md names
// a file that exists (and a heading that exists, for a link with a
// #fragment into a Markdown file), and README.md stays a page a newcomer
// reads in minutes.
package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// readmeBudget is README.md's size limit in bytes: what it is, the two
// set-up commands, a KV example, a worker example and links. Everything
// else belongs in a page of docs/.
const readmeBudget = 12 << 10

// mdLink matches an inline link or image: [text](target) or ![alt](target).
var mdLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)

// markdownFiles returns README.md and docs/*.md, as paths relative to this
// directory (where go test runs the test).
func markdownFiles(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("no Markdown pages in docs/")
	}
	return append([]string{filepath.Join("..", "README.md")}, pages...)
}

// prose returns the text of a Markdown page outside fenced code blocks,
// indented code blocks and inline code spans, where a bracket followed by a
// parenthesis is Go code, not a link.
func prose(text string) string {
	var b strings.Builder
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced || strings.HasPrefix(line, "    ") || strings.HasPrefix(line, "\t") {
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return regexp.MustCompile("`[^`]*`").ReplaceAllString(b.String(), "")
}

// anchors returns the GitHub anchors of a Markdown page's headings:
// lowercased, characters other than letters, digits, '-' and '_' removed,
// spaces as '-'.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	for _, line := range strings.Split(prose(text), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		var b strings.Builder
		for _, r := range h {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r):
				b.WriteRune(r)
			}
		}
		out[b.String()] = true
	}
	return out
}

// TestRelativeLinksResolve checks every relative link of README.md and
// docs/*.md: its target exists, and a #fragment into a Markdown page names
// one of that page's headings.
func TestRelativeLinksResolve(t *testing.T) {
	links := 0
	for _, page := range markdownFiles(t) {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(prose(string(text)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			file, frag, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), filepath.FromSlash(file))
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s: link %q: %v", page, target, err)
				continue
			}
			if frag == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			dest, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !anchors(string(dest))[frag] {
				t.Errorf("%s: link %q: %s has no heading with anchor #%s", page, target, path, frag)
			}
		}
	}
	if links == 0 {
		t.Fatal("found no relative links: the link pattern is broken")
	}
}

// TestReadmeIsShort holds README.md to its budget and to what CI and a
// newcomer rely on: the main job's command and the test command, verbatim.
func TestReadmeIsShort(t *testing.T) {
	text, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(text) > readmeBudget {
		t.Errorf("README.md is %d bytes, over its budget of %d: move detail into a page of docs/ and link it", len(text), readmeBudget)
	}
	for _, cmd := range []string{
		"go run ./examples/grpo",
		"go test ./... ./bench/... ./tqprom/... ./tqserve/... ./cmd/tq/... ./examples/...",
		"apt-get install redis-server redis-tools",
	} {
		if !strings.Contains(string(text), cmd) {
			t.Errorf("README.md lacks %q", cmd)
		}
	}
	for _, page := range markdownFiles(t)[1:] {
		if !strings.Contains(string(text), "docs/"+filepath.Base(page)) {
			t.Errorf("README.md does not link %s", page)
		}
	}
}

// TestAliasDocsListFields holds package tq's exported type aliases to their
// doc comments: go doc does not show the fields of an aliased struct, so
// the alias's comment must name every exported field of the struct it
// aliases (in a package of this module).
func TestAliasDocsListFields(t *testing.T) {
	const module = "github.com/tqgo/tqgo/"
	fset := token.NewFileSet()
	// structs[dir][name] is the exported field names of a struct type.
	structs := map[string]map[string][]string{}
	structsOf := func(dir string) map[string][]string {
		if m, ok := structs[dir]; ok {
			return m
		}
		m := map[string][]string{}
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				ts, ok := n.(*ast.TypeSpec)
				if !ok {
					return true
				}
				if st, ok := ts.Type.(*ast.StructType); ok {
					var fields []string
					for _, fl := range st.Fields.List {
						for _, id := range fl.Names {
							if id.IsExported() {
								fields = append(fields, id.Name)
							}
						}
					}
					m[ts.Name.Name] = fields
				}
				return false
			})
		}
		structs[dir] = m
		return m
	}
	files, err := filepath.Glob(filepath.Join("..", "tq", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	aliases := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		imports := map[string]string{} // package name -> directory
		for _, im := range f.Imports {
			path := strings.Trim(im.Path.Value, `"`)
			if !strings.HasPrefix(path, module) {
				continue
			}
			pkg := filepath.Base(path)
			if im.Name != nil {
				pkg = im.Name.Name
			}
			imports[pkg] = filepath.Join("..", filepath.FromSlash(strings.TrimPrefix(path, module)))
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				sel, ok := ts.Type.(*ast.SelectorExpr)
				if !ts.Assign.IsValid() || !ts.Name.IsExported() || !ok {
					continue
				}
				pkg, ok := sel.X.(*ast.Ident)
				if !ok || imports[pkg.Name] == "" {
					continue
				}
				fields, ok := structsOf(imports[pkg.Name])[sel.Sel.Name]
				if !ok {
					continue // not a struct: go doc shows all there is
				}
				aliases++
				doc := ts.Doc
				if doc == nil {
					doc = gd.Doc
				}
				text := ""
				if doc != nil {
					text = doc.Text()
				}
				words := map[string]bool{}
				for _, w := range strings.FieldsFunc(text, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' }) {
					words[w] = true
				}
				for _, field := range fields {
					if !words[field] {
						t.Errorf("tq.%s (= %s.%s): its doc comment does not name the field %s; go doc shows no fields of an alias", ts.Name.Name, pkg.Name, sel.Sel.Name, field)
					}
				}
			}
		}
	}
	if aliases == 0 {
		t.Fatal("found no alias of a struct in package tq: the parse is broken")
	}
}
