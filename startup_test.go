package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"berth.dev/berth/internal/inittrace"
)

// berth is one binary: every command, and every re-exec of a built-in
// plugin, initialises every package linked into it before main runs. So
// what the agent, servers, drivers and plugins set up at package level,
// `berth version` pays too (issue 26). These tests pin what that costs, by
// what it allocates (stable from machine to machine, unlike time); `make
// bench` section cli measures the time.

// docsGenerator is what urfave/cli links unless built with
// urfave_cli_no_docs: berth never generates man pages or markdown.
var docsGenerator = []string{"github.com/cpuguy83/go-md2man/v2/md2man", "github.com/russross/blackfriday/v2"}

// promClient is what Prometheus' Go client sets up at start: a default
// registry with Go and process collectors, which read runtime/metrics and
// procfs. berth serves its metrics through internal/promtext instead
// (~0.6 ms of every start, issue 26).
var promClient = []string{"github.com/prometheus/client_golang/prometheus", "github.com/prometheus/procfs", "runtime/metrics", "expvar"}

// makeBuildTags returns the tags `make build` builds berth with, and fails
// the test unless the build target uses them.
func makeBuildTags(t *testing.T) string {
	t.Helper()
	mk, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^build:\n\t\$\(GO\) build -tags '\$\(BUILD_TAGS\)' -o \$\(BIN\) \.$`).Match(mk) {
		t.Fatal("the Makefile's build target no longer builds with -tags $(BUILD_TAGS)")
	}
	m := regexp.MustCompile(`(?m)^BUILD_TAGS \?= (\S+)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile sets no BUILD_TAGS")
	}
	return string(m[1])
}

func TestStartupBuildLeavesOutTheDocsGenerator(t *testing.T) {
	tags := makeBuildTags(t)
	out, err := exec.Command("go", "list", "-deps", "-tags", tags, ".").Output()
	if err != nil {
		t.Fatalf("go list -deps -tags %s .: %v", tags, err)
	}
	deps := strings.Fields(string(out))
	for _, p := range docsGenerator {
		if slices.Contains(deps, p) {
			t.Errorf("make build's berth (tags %q) links %s, the CLI framework's docs generator", tags, p)
		}
	}
	// The tag is what leaves it out: without it urfave/cli links it (if
	// this fails, a new urfave/cli no longer needs the tag, or berth no
	// longer uses urfave/cli, and BUILD_TAGS can go).
	out, err = exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(strings.Fields(string(out)), docsGenerator[0]) {
		t.Errorf("without tags berth no longer links %s: urfave_cli_no_docs is no longer needed", docsGenerator[0])
	}
}

// gRPC's request tracing (golang.org/x/net/trace: its package set-up, and
// handlers on http.DefaultServeMux) is left out by grpcnotrace: berth
// never enables it.
func TestStartupBuildLeavesOutGRPCTracing(t *testing.T) {
	tags := makeBuildTags(t)
	out, err := exec.Command("go", "list", "-deps", "-tags", tags, ".").Output()
	if err != nil {
		t.Fatalf("go list -deps -tags %s .: %v", tags, err)
	}
	if slices.Contains(strings.Fields(string(out)), "golang.org/x/net/trace") {
		t.Errorf("make build's berth (tags %q) links golang.org/x/net/trace: grpcnotrace is missing", tags)
	}
}

// make build's berth links no cgo: a dynamically linked berth paid the
// dynamic loader and the C library's start-up in every process (~1 ms, ~9%
// of `berth version`; issue 26). The task user lookup that needed cgo for
// NSS asks getent (taskexec.LookupUser).
func TestStartupBuildLinksNoCgo(t *testing.T) {
	tags := makeBuildTags(t)
	out, err := exec.Command("go", "list", "-deps", "-tags", tags, ".").Output()
	if err != nil {
		t.Fatalf("go list -deps -tags %s .: %v", tags, err)
	}
	if slices.Contains(strings.Fields(string(out)), "runtime/cgo") {
		t.Errorf("make build's berth (tags %q) links runtime/cgo: it starts through the dynamic loader; what needs cgo? (go list -deps -f '{{if .CgoFiles}}{{.ImportPath}}{{end}}' -tags %s .)", tags, tags)
	}
}

// Budgets of what initialising berth's packages may allocate. A package
// that compiles a regexp with a counted repeat ({0,61}), walks protobuf
// descriptors or builds a large table at package level costs thousands of
// allocations and hundreds of KiB: such work belongs behind sync.OnceValue
// (see builtin/csi/hostpath/lazy.go, host/agent's registerBound).
const (
	// pkgAllocs and pkgBytes bound each berth package's initialisation,
	// but for generatedProtos.
	pkgAllocs = 300
	pkgBytes  = 64 << 10
	// totalBytes and totalAllocs bound the whole binary's, third-party
	// packages included (1.44-1.46 MB and ~6,710 allocations in session
	// 10; 2.2 MiB before issue 26's work; 1.24 MB and ~5,250 allocations
	// once Prometheus' Go client was gone, session 12). A dependency that costs more at
	// start-up than this leaves room for must be justified, and the
	// budget raised here with the figures.
	totalBytes  = 1300 << 10
	totalAllocs = 6000
)

// generatedProtos are berth's packages of generated protobuf code: their
// initialisation registers their descriptors in protobuf's global
// registry, which generated code does at package level (the floor of any
// binary that links them; the CLI needs rpc/pb).
var generatedProtos = []string{"berth.dev/berth/rpc/pb", "berth.dev/berth/sdk/driverpb", "berth.dev/berth/sdk/storagepb"}

func TestStartupInitialisesLittle(t *testing.T) {
	tags := makeBuildTags(t)
	bin := filepath.Join(t.TempDir(), "berth")
	// The budgets are of the binary make build makes: GOFLAGS from the
	// environment (-cover, -race) would add their own initialisation.
	build := exec.Command("go", "build", "-tags", tags, "-o", bin, ".")
	build.Env = append(os.Environ(), "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	inits, err := inittrace.Run(bin, "version")
	if err != nil {
		t.Fatal(err)
	}
	var total, allocs int64
	for _, in := range inits {
		total += in.Bytes
		allocs += in.Allocs
		if slices.Contains(docsGenerator, in.Package) {
			t.Errorf("berth version initialises %s, the CLI framework's docs generator", in.Package)
		}
		if slices.Contains(promClient, in.Package) {
			t.Errorf("berth version initialises %s, of Prometheus' Go client (use internal/promtext)", in.Package)
		}
		if !strings.HasPrefix(in.Package, "berth.dev/berth") || slices.Contains(generatedProtos, in.Package) {
			continue
		}
		if in.Allocs > pkgAllocs || in.Bytes > pkgBytes {
			t.Errorf("initialising %s allocates %d times, %d bytes (budget %d, %d): every berth command pays it; make the package-level work lazy (sync.OnceValue)",
				in.Package, in.Allocs, in.Bytes, pkgAllocs, pkgBytes)
		}
	}
	if total > totalBytes || allocs > totalAllocs {
		t.Errorf("initialising berth's packages allocates %d bytes in %d allocations, over the budget of %d in %d; GODEBUG=inittrace=1 %s version shows which",
			total, allocs, totalBytes, totalAllocs, bin)
	}
}
