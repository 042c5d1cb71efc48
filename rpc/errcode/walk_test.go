package errcode

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
)

// The sentinel walker: parses every non-test Go file of a module (not
// building it, so files for other platforms count too) and finds every
// exported package-level variable named Err…. Each must carry a code:
//
//   - declared as errcode.New(codes.X, "...") with X neither OK nor Unknown;
//   - or, under sdk/ (which may not import errcode), declared as
//     sdkerr.New(codes.X, "REASON", "...") with such a code and a wire
//     reason no other sdk sentinel has; Code reads that code at run time
//     through the sentinel's GRPCCode method, so the declaration is what
//     codes it (a table elsewhere naming a plain errors.New would not);
//   - or an alias (ErrX = other.ErrY) of a sentinel that carries one.

const (
	codesPath     = "google.golang.org/grpc/codes"
	sdkDir        = "sdk"
	sdkerrPkgPath = "/sdk/internal/sdkerr" // under the module
)

// codeByName maps "NotFound" to codes.NotFound, for every code gRPC defines.
var codeByName = func() map[string]codes.Code {
	m := map[string]codes.Code{}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		m[c.String()] = c
	}
	return m
}()

// foundSentinel is one exported Err… variable.
type foundSentinel struct {
	key   string // import path + "." + name
	pos   token.Position
	code  codes.Code // when coded directly (errcode.New, sdkerr.New)
	coded bool
	// reason is an sdk sentinel's wire reason; reasonPos is where it is.
	reason    string
	reasonPos token.Position
	alias     string // key of the sentinel it aliases, if it is an alias
	why       string // what is wrong, when it is neither coded nor an alias
}

// walkResult is what a walk found.
type walkResult struct {
	sentinels  map[string]*foundSentinel
	violations []string
}

// codeOf follows aliases to the code of the sentinel key, or explains why
// there is none.
func (w *walkResult) codeOf(key string) (codes.Code, string) {
	seen := map[string]bool{}
	for hops := 0; ; hops++ {
		s, ok := w.sentinels[key]
		switch {
		case !ok:
			return 0, "alias of " + key + ", which is not an exported berth sentinel"
		case seen[key]:
			return 0, "alias cycle through " + key
		case s.coded:
			return s.code, ""
		case s.alias == "" && hops > 0:
			return 0, "alias of " + key + ", which has no code"
		case s.alias == "":
			return 0, s.why
		}
		seen[key] = true
		key = s.alias
	}
}

// walkSentinels walks the module rooted at root (the directory of its
// go.mod) and sdk/, berth's plugin SDK module inside it. Other nested
// modules (examples/), testdata and hidden directories are skipped.
func walkSentinels(root string) (*walkResult, error) {
	module, err := modulePath(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	ctors := constructors{errcode: module + "/rpc/errcode", sdkerr: module + sdkerrPkgPath}
	res := &walkResult{sentinels: map[string]*foundSentinel{}}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "." {
				return nil
			}
			name := d.Name()
			if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" {
				return filepath.SkipDir
			}
			// sdk/ is a module of its own (berth.dev/berth/sdk) but berth's
			// own code, its packages at the same import paths: walked.
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil && rel != sdkDir {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := path.Dir(rel)
		pkgPath := module
		if dir != "." {
			pkgPath = module + "/" + dir
		}
		imports := fileImports(f)
		inSDK := dir == sdkDir || strings.HasPrefix(dir, sdkDir+"/")
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if !isSentinelName(id.Name) {
						continue
					}
					s := &foundSentinel{key: pkgPath + "." + id.Name, pos: fset.Position(id.Pos())}
					var value ast.Expr
					if len(vs.Values) == len(vs.Names) {
						value = vs.Values[i]
					}
					classify(s, value, fset, pkgPath, imports, ctors, inSDK)
					res.sentinels[s.key] = s
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	checkReasons(root, res)
	for _, s := range res.sentinels {
		if _, why := res.codeOf(s.key); why != "" {
			res.violations = append(res.violations, fmt.Sprintf("%s: %s has no code: %s", relPos(root, s.pos), s.key, why))
		}
	}
	sortByPosition(res.violations)
	return res, nil
}

// sortByPosition sorts "file:line:col: message" lines by file, then by line
// and column as numbers, so fsm/errors.go:8 comes before fsm/errors.go:14.
func sortByPosition(lines []string) {
	type key struct {
		file      string
		line, col int
	}
	parse := func(s string) key {
		parts := strings.SplitN(s, ":", 4)
		if len(parts) < 4 {
			return key{file: s}
		}
		line, _ := strconv.Atoi(parts[1])
		col, _ := strconv.Atoi(parts[2])
		return key{parts[0], line, col}
	}
	sort.SliceStable(lines, func(i, j int) bool {
		a, b := parse(lines[i]), parse(lines[j])
		if a.file != b.file {
			return a.file < b.file
		}
		if a.line != b.line {
			return a.line < b.line
		}
		return a.col < b.col
	})
}

// isSentinelName reports whether an identifier names a sentinel: exported,
// "Err" followed by an upper-case letter (ErrNodeNotFound, not Errors).
func isSentinelName(name string) bool {
	return len(name) > 3 && strings.HasPrefix(name, "Err") && 'A' <= name[3] && name[3] <= 'Z'
}

// checkReasons makes sure no two sdk sentinels share a wire reason (the
// later one, in file order, is reported): the client side would turn both
// into whichever registered first. sdkerr.New panics on it too, but only in
// a program that links both packages.
func checkReasons(root string, res *walkResult) {
	var withReason []*foundSentinel
	for _, s := range res.sentinels {
		if s.coded && s.reason != "" {
			withReason = append(withReason, s)
		}
	}
	sort.Slice(withReason, func(i, j int) bool {
		a, b := withReason[i].reasonPos, withReason[j].reasonPos
		if a.Filename != b.Filename {
			return a.Filename < b.Filename
		}
		return a.Offset < b.Offset
	})
	first := map[string]*foundSentinel{}
	for _, s := range withReason {
		if other, ok := first[s.reason]; ok {
			s.coded = false
			s.why = fmt.Sprintf("its wire reason %q is %s's already (%s)", s.reason, other.key, relPos(root, other.reasonPos))
			continue
		}
		first[s.reason] = s
	}
}

// constructors are the import paths of the packages whose New declares a
// coded sentinel: errcode for berth, sdkerr under sdk/.
type constructors struct{ errcode, sdkerr string }

// classify decides how s gets its code from its initializer.
func classify(s *foundSentinel, value ast.Expr, fset *token.FileSet, pkgPath string, imports map[string]string, ctors constructors, inSDK bool) {
	want := `errcode.New(codes.X, "...")`
	if inSDK {
		want = `sdkerr.New(codes.X, "REASON", "...") (sdk/internal/sdkerr)`
	}
	switch v := value.(type) {
	case nil:
		s.why = "no initializer of its own; declare it with " + want
		return
	case *ast.Ident:
		s.alias = pkgPath + "." + v.Name
		return
	case *ast.SelectorExpr:
		if x, ok := v.X.(*ast.Ident); ok && imports[x.Name] != "" {
			s.alias = imports[x.Name] + "." + v.Sel.Name
			return
		}
	case *ast.CallExpr:
		sel, ok := v.Fun.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "New" {
			break
		}
		x, ok := sel.X.(*ast.Ident)
		if !ok {
			break
		}
		switch {
		case !inSDK && imports[x.Name] == ctors.errcode:
			if len(v.Args) != 2 {
				s.why = "errcode.New needs a code and a message"
				return
			}
		case inSDK && imports[x.Name] == ctors.sdkerr:
			if len(v.Args) != 3 {
				s.why = "sdkerr.New needs a code, a wire reason and a message"
				return
			}
			reason, ok := stringLit(v.Args[1])
			switch {
			case !ok:
				s.why = "the wire reason " + types.ExprString(v.Args[1]) + " is not a string literal the check can read"
				return
			case reason == "":
				s.why = "its wire reason is empty"
				return
			}
			s.reason, s.reasonPos = reason, fset.Position(v.Args[1].Pos())
		default:
			s.why = "declared with " + types.ExprString(value) + "; declare it with " + want
			return
		}
		code, ok := codeExpr(v.Args[0], imports)
		switch {
		case !ok:
			s.why = "the code " + types.ExprString(v.Args[0]) + " is not a codes.X constant the check can read"
		case code == codes.OK || code == codes.Unknown:
			s.why = "code " + code.String() + " classifies nothing; pick the code callers should branch on"
		default:
			s.code, s.coded = code, true
		}
		return
	}
	s.why = "declared with " + types.ExprString(value) + "; declare it with " + want
}

// stringLit reads a string literal.
func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// codeExpr reads codes.X.
func codeExpr(e ast.Expr, imports map[string]string) (codes.Code, bool) {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return 0, false
	}
	x, ok := sel.X.(*ast.Ident)
	if !ok || imports[x.Name] != codesPath {
		return 0, false
	}
	c, ok := codeByName[sel.Sel.Name]
	return c, ok
}

// fileImports maps each import's local name to its path.
func fileImports(f *ast.File) map[string]string {
	m := map[string]string{}
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		name := path.Base(p)
		if imp.Name != nil {
			name = imp.Name.Name
		} else if len(name) > 1 && name[0] == 'v' && strings.Trim(name[1:], "0123456789") == "" {
			// A major-version suffix (…/v2) is not the package's name.
			name = path.Base(path.Dir(p))
		}
		m[name] = p
	}
	return m
}

// modulePath reads the module line of a go.mod.
func modulePath(gomod string) (string, error) {
	f, err := os.Open(gomod)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	return "", fmt.Errorf("%s: no module line", gomod)
}

// moduleRoot walks up from the working directory to the directory holding
// go.mod, so the walk covers the real tree wherever the test runs.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

func relPos(root string, pos token.Position) string {
	if rel, err := filepath.Rel(root, pos.Filename); err == nil {
		pos.Filename = filepath.ToSlash(rel)
	}
	return pos.String()
}
