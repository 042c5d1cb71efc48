// Command importcheck enforces the import rules of DESIGN.md; `make check`
// runs it on the repository root. It reads source with go/parser, so it
// needs no build and reports every violation with file and line:
//
//   - fsm/ and host/scheduler/ do no I/O and read no clock or randomness:
//     no net, os, math/rand, crypto/rand, syscall, and no time.Now and friends.
//   - sdk/ imports nothing of berth outside sdk/.
//   - packages outside host/ (and the root main package) do not import host/.
//
// Test files are exempt: tests may use the clock and the filesystem.
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

const module = "berth.dev/berth"

// pureBanned are imports a pure package may not use.
var pureBanned = []string{"net", "os", "math/rand", "math/rand/v2", "crypto/rand", "syscall", "os/exec", "os/signal"}

// clockCalls are the time package functions that read the clock or start timers.
var clockCalls = map[string]bool{
	"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true,
	"AfterFunc": true, "Tick": true, "NewTimer": true, "NewTicker": true,
}

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	violations, err := check(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "importcheck:", err)
		os.Exit(2)
	}
	for _, v := range violations {
		fmt.Fprintln(os.Stderr, v)
	}
	if len(violations) > 0 {
		fmt.Fprintf(os.Stderr, "importcheck: %d violation(s) of the import rules in DESIGN.md\n", len(violations))
		os.Exit(1)
	}
}

func check(root string) ([]string, error) {
	var out []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			// Separate modules (examples) and build output have their own rules.
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || rel == "build" || rel == "examples" || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		pure := under(dir, "fsm") || under(dir, "host/scheduler")
		if pure {
			// Clock calls need the whole file, not just imports.
			if f, err = parser.ParseFile(fset, path, nil, 0); err != nil {
				return err
			}
		}
		out = append(out, checkFile(fset, f, dir, pure)...)
		return nil
	})
	sort.Strings(out)
	return out, err
}

func checkFile(fset *token.FileSet, f *ast.File, dir string, pure bool) []string {
	var out []string
	report := func(pos token.Pos, format string, args ...any) {
		out = append(out, fmt.Sprintf("%s: %s", fset.Position(pos), fmt.Sprintf(format, args...)))
	}
	timeName := ""
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		switch {
		case pure && banned(path):
			report(imp.Pos(), "%s must not import %q (the state machine and scheduler do no I/O)", dir, path)
		case under(dir, "sdk") && strings.HasPrefix(path, module+"/") && !under(strings.TrimPrefix(path, module+"/"), "sdk"):
			report(imp.Pos(), "sdk/ must not import %q: third-party drivers link sdk/ alone", path)
		case !under(dir, "host") && dir != "." && strings.HasPrefix(path, module+"/host"):
			report(imp.Pos(), "%s must not import %q: leaf packages do not depend on host/", dir, path)
		}
		if path == "time" {
			timeName = "time"
			if imp.Name != nil {
				timeName = imp.Name.Name
			}
		}
	}
	if pure && timeName != "" {
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == timeName && clockCalls[sel.Sel.Name] {
				report(sel.Pos(), "%s must not call time.%s: time travels inside the command", dir, sel.Sel.Name)
			}
			return true
		})
	}
	return out
}

func banned(path string) bool {
	for _, b := range pureBanned {
		if path == b || strings.HasPrefix(path, b+"/") && b == "net" {
			return true
		}
	}
	return false
}

// under reports whether dir is pkg or inside it.
func under(dir, pkg string) bool {
	return dir == pkg || strings.HasPrefix(dir, pkg+"/")
}
