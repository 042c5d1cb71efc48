package main

import (
	"bufio"
	"bytes"
	"errors"
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

// purePackages are the directories under the pure rules.
var purePackages = []string{"fsm", "host/scheduler", "internal/rules"}

// programs are main packages that drive the whole product, and so may
// import host/: the berth binary, the benchmark runner and the node
// simulator (which runs host/client's Client thousands of times).
var programs = map[string]bool{".": true, "bench": true, "bench/nodesim": true}

// requiredPackages must hold non-test Go files for the check to mean anything.
var requiredPackages = []string{"fsm", "sdk"}

// pureBanned are imports a pure package may not use, with their subpackages.
var pureBanned = []string{
	"net", "os", "syscall", "math/rand", "crypto/rand", "golang.org/x/sys", "io/ioutil", "plugin",
}

// A depRule bans some imports from some packages: a file in a directory
// under one of from must not import any of
// banned or their subpackages. Test files are exempt unless tests is set:
// a test links nothing into the product.
type depRule struct {
	from   []string
	banned []string
	tests  bool
	why    string
}

// depRules are the dependency rules of DESIGN.md § Layout beyond the sdk,
// purity and host/ leaf rules above. Each violation is reported on its own
// line with the rule's reason, which names the packages it is about.
var depRules = []depRule{
	{
		from:   []string{"host/client"},
		banned: []string{module + "/fsm", module + "/host/scheduler"},
		why:    "host/client/... links neither the state machine nor the scheduler (the rules they share are a leaf package)",
	},
	{
		from:   []string{"csi"},
		banned: []string{module + "/builtin"},
		why:    "the CSI library (csi/...) does not link the built-in plugins (builtin/...)",
	},
	{
		from:   []string{"rpc", "csi", "internal", "volumehooks", "taskdrivers", "sdk"},
		banned: []string{"github.com/hashicorp/raft", "github.com/hashicorp/raft-boltdb"},
		why:    "leaf packages (rpc/, csi/, internal/, volumehooks/, taskdrivers/, sdk/) do not link raft: only the server core and fsm do",
	},
	{
		from:   []string{"."},
		banned: []string{module + "/bench"},
		tests:  true,
		why:    "bench is a program: nothing imports it",
	},
}

// matches reports whether a file in dir, a test file or not, is under r.
func (r depRule) matches(dir string, test bool) bool {
	if test && !r.tests {
		return false
	}
	for _, f := range r.from {
		if f == "." || under(dir, f) {
			return true
		}
	}
	return false
}

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
	violations, err := check(root, nil)
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

// check returns every violation under root, the berth module's directory,
// as "path:line:col: message" with paths relative to root. overlay replaces
// or adds files (slash-separated paths relative to root) as `go build
// -overlay` does; tests use it to plant violations in the real tree.
func check(root string, overlay map[string][]byte) ([]string, error) {
	if err := checkModule(root, overlay); err != nil {
		return nil, err
	}
	files, err := goFiles(root, overlay)
	if err != nil {
		return nil, err
	}
	var out []string
	seen := map[string]bool{}
	fset := token.NewFileSet()
	for _, rel := range files {
		src, ok := overlay[rel]
		if !ok {
			if src, err = os.ReadFile(filepath.Join(root, filepath.FromSlash(rel))); err != nil {
				return nil, err
			}
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		test := strings.HasSuffix(rel, "_test.go")
		pure := !test && underAny(dir, purePackages)
		if !test {
			for _, p := range requiredPackages {
				seen[p] = seen[p] || under(dir, p)
			}
		}
		mode := parser.ImportsOnly
		if pure {
			mode = 0 // clock calls need the whole file, not just imports
		}
		f, err := parser.ParseFile(fset, rel, src, mode)
		if err != nil {
			return nil, err
		}
		out = append(out, checkFile(fset, f, dir, pure, test)...)
	}
	for _, p := range requiredPackages {
		if !seen[p] {
			return nil, fmt.Errorf("%s: no Go files in %s/: the import rules name it, so a moved package must move its rule", root, p)
		}
	}
	sort.Strings(out)
	return out, nil
}

// checkModule refuses a root that is not the berth module, so running the
// check from the wrong directory fails instead of finding nothing.
func checkModule(root string, overlay map[string][]byte) error {
	src, ok := overlay["go.mod"]
	if !ok {
		var err error
		if src, err = os.ReadFile(filepath.Join(root, "go.mod")); err != nil {
			return fmt.Errorf("%s is not the berth module's root: %w", root, err)
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(src))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "module" && f[1] == module {
			return nil
		}
	}
	return fmt.Errorf("%s/go.mod does not declare module %s", root, module)
}

// goFiles lists the Go files of the module under root, and the overlay's.
func goFiles(root string, overlay map[string][]byte) ([]string, error) {
	set := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && skipDir(rel, d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(rel, ".go") {
			set[rel] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for rel := range overlay {
		if !strings.HasSuffix(rel, ".go") {
			continue
		}
		if rel != filepath.ToSlash(filepath.Clean(rel)) || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
			return nil, errors.New("overlay path " + strconv.Quote(rel) + " is not a clean path relative to the root")
		}
		set[rel] = true
	}
	files := make([]string, 0, len(set))
	for rel := range set {
		files = append(files, rel)
	}
	sort.Strings(files)
	return files, nil
}

// skipDir reports directories that are not part of the module's packages:
// separate modules (examples), build output, hidden and testdata trees.
func skipDir(rel, name string) bool {
	return strings.HasPrefix(name, ".") || name == "testdata" || rel == "build" || rel == "examples"
}

func checkFile(fset *token.FileSet, f *ast.File, dir string, pure, test bool) []string {
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
		case !test && !under(dir, "host") && !programs[dir] && under(path, module+"/host"):
			report(imp.Pos(), "%s must not import %q: leaf packages do not depend on host/", dir, path)
		}
		for _, r := range depRules {
			if r.matches(dir, test) && underAny(path, r.banned) {
				report(imp.Pos(), "%s must not import %q: %s", dir, path, r.why)
			}
		}
		if pure && path == "time" {
			timeName = "time"
			if imp.Name != nil {
				timeName = imp.Name.Name
			}
			if timeName == "." {
				report(imp.Pos(), "%s must not dot-import \"time\": clock calls would hide as plain Now()", dir)
			}
		}
	}
	if timeName != "" && timeName != "." {
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
		if under(path, b) {
			return true
		}
	}
	return false
}

// under reports whether dir is pkg or inside it.
func under(dir, pkg string) bool {
	return dir == pkg || strings.HasPrefix(dir, pkg+"/")
}

func underAny(dir string, pkgs []string) bool {
	for _, p := range pkgs {
		if under(dir, p) {
			return true
		}
	}
	return false
}
