package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

func main() {
	var o options
	flag.StringVar(&o.fuzzTime, "fuzztime", "3s", "go test -fuzztime for each target (a duration, or Nx for N inputs)")
	// The coordinator also shrinks every new interesting input for up to
	// this long, with no other input run meanwhile: at 10s a 3s pass over
	// the job parser ran 24 inputs, at 1s 4,639.
	flag.DurationVar(&o.minimizeTime, "minimizetime", time.Second, "go test -fuzzminimizetime: how long to shrink a failing or newly interesting input")
	flag.Func("C", "a module's root to fuzz (repeatable; default the current directory): berth is two modules, . and sdk", func(dir string) error {
		o.dirs = append(o.dirs, dir)
		return nil
	})
	flag.Parse()
	if len(o.dirs) == 0 {
		o.dirs = []string{"."}
	}
	o.patterns = flag.Args()
	if len(o.patterns) == 0 {
		o.patterns = []string{"./..."}
	}
	o.goCmd = os.Getenv("GO")
	if o.goCmd == "" {
		o.goCmd = "go"
	}
	if err := run(context.Background(), o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fuzzshort:", err)
		os.Exit(1)
	}
}

type options struct {
	goCmd        string
	dirs         []string // module roots; the patterns are matched in each
	fuzzTime     string
	minimizeTime time.Duration
	patterns     []string
}

// target is one fuzz function of one package, in the module rooted at dir.
type target struct{ dir, pkg, name string }

func (t target) String() string { return t.pkg + " " + t.name }

// FailedError is returned by run when targets failed; it names them.
type FailedError struct{ Targets []target }

func (e *FailedError) Error() string {
	names := make([]string, len(e.Targets))
	for i, t := range e.Targets {
		names[i] = t.String()
	}
	return fmt.Sprintf("%d fuzz target(s) failed: %s", len(e.Targets), strings.Join(names, ", "))
}

func run(ctx context.Context, o options, out io.Writer) error {
	start := time.Now()
	var targets []target
	for _, dir := range o.dirs {
		found, err := discover(ctx, o, dir)
		if err != nil {
			return err
		}
		if len(found) == 0 {
			return fmt.Errorf("no fuzz targets found in %s of the module at %s: it has some, so discovery is broken", strings.Join(o.patterns, " "), dir)
		}
		targets = append(targets, found...)
	}
	fmt.Fprintf(out, "fuzzshort: %d targets, -fuzztime %s each (found in %s)\n", len(targets), o.fuzzTime, time.Since(start).Round(100*time.Millisecond))
	var failed []target
	for _, t := range targets {
		began := time.Now()
		fuzz := func() ([]byte, error) {
			return goCmd(ctx, o, t.dir, "test", "-run", "^$", "-fuzz", "^"+t.name+"$", "-fuzztime", o.fuzzTime,
				"-fuzzminimizetime", o.minimizeTime.String(), t.pkg)
		}
		res, err := fuzz()
		if err != nil && coordinatorRace(res, t.name) {
			// Go 1.26's fuzz coordinator can fail a target at the end of
			// -fuzztime with a bare "context deadline exceeded" and no
			// failing input (go.dev/issue/75804, fixed in Go 1.27): nothing
			// was found, so the target runs once more, and a second failure
			// of any kind fails the pass.
			fmt.Fprintf(out, "RETRY %s: the Go fuzz coordinator's deadline race (go.dev/issue/75804), no failing input written\n", t)
			res, err = fuzz()
		}
		took := time.Since(began).Round(100 * time.Millisecond)
		if err != nil {
			failed = append(failed, t)
			fmt.Fprintf(out, "FAIL  %-8s %s\n%s\n", took, t, indent(res))
			continue
		}
		fmt.Fprintf(out, "ok    %-8s %s\n", took, t)
	}
	fmt.Fprintf(out, "fuzzshort: %d targets in %s, %d failed\n", len(targets), time.Since(start).Round(100*time.Millisecond), len(failed))
	if len(failed) > 0 {
		return &FailedError{Targets: failed}
	}
	return nil
}

// coordinatorRace reports whether a failed fuzz run's output is the Go
// fuzz coordinator's deadline race rather than a finding: the target
// failed with nothing but "context deadline exceeded", and no failing
// input was written.
func coordinatorRace(out []byte, name string) bool {
	s := string(out)
	if strings.Contains(s, "Failing input written to") {
		return false
	}
	head := "--- FAIL: " + name + " ("
	i := strings.Index(s, head)
	if i < 0 {
		return false
	}
	lines := strings.Split(s[i:], "\n")
	return len(lines) > 1 && strings.TrimSpace(lines[1]) == "context deadline exceeded"
}

// fuzzDecl matches a fuzz function declaration in a test file; go test
// -list decides what is really a target, this only skips packages that
// cannot have one.
var fuzzDecl = regexp.MustCompile(`(?m)^func Fuzz`)

// discover lists the fuzz targets of the packages o.patterns match in the
// module rooted at dir.
func discover(ctx context.Context, o options, dir string) ([]target, error) {
	args := append([]string{"list", "-f", "{{.ImportPath}}\t{{.Dir}}\t{{join .TestGoFiles \",\"}},{{join .XTestGoFiles \",\"}}"}, o.patterns...)
	listed, err := goCmd(ctx, o, dir, args...)
	if err != nil {
		return nil, fmt.Errorf("go list: %w\n%s", err, listed)
	}
	var targets []target
	sc := bufio.NewScanner(bytes.NewReader(listed))
	for sc.Scan() {
		fields := strings.Split(sc.Text(), "\t")
		if len(fields) != 3 {
			return nil, fmt.Errorf("go list printed %q, want import path, dir and files", sc.Text())
		}
		pkg, pkgDir := fields[0], fields[1]
		has, err := declaresFuzz(pkgDir, strings.Split(fields[2], ","))
		if err != nil {
			return nil, err
		}
		if !has {
			continue
		}
		names, err := goCmd(ctx, o, dir, "test", "-run", "^$", "-fuzz", "^$", "-list", "^Fuzz", pkg)
		if err != nil {
			return nil, fmt.Errorf("go test -list in %s: %w\n%s", pkg, err, names)
		}
		for _, line := range strings.Split(string(names), "\n") {
			if strings.HasPrefix(line, "Fuzz") && !strings.ContainsAny(line, " \t") {
				targets = append(targets, target{dir: dir, pkg: pkg, name: line})
			}
		}
	}
	return targets, sc.Err()
}

func declaresFuzz(dir string, files []string) (bool, error) {
	for _, f := range files {
		if f == "" {
			continue
		}
		src, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return false, err
		}
		if fuzzDecl.Match(src) {
			return true, nil
		}
	}
	return false, nil
}

// goCmd runs the go command in dir and returns its combined output. A run
// is bounded, so a hung target fails the pass instead of hanging CI.
func goCmd(ctx context.Context, o options, dir string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, o.goCmd, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("%s %s: timed out: %w", o.goCmd, strings.Join(args, " "), ctx.Err())
	}
	return out, err
}

func indent(b []byte) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(string(b), "\n"), "\n", "\n    ")
}
