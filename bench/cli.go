package main

import (
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"berth.dev/berth/internal/inittrace"
)

// The cli section measures the start-up of berth's command line (issue
// 26): `berth version` and `berth node status` against a dev agent the
// section starts on loopback, each whole process from its start to its
// exit, against a hello-world Go program built in the same run (what any
// Go binary costs to start on this machine). Target: each ≤ 3× the
// hello-world, medians of the ratios taken round by round.
//
// Every round runs each program once, in an order rotated from round to
// round, so a drift of the machine's speed moves all of them together
// and the ratios stay meaningful. Beside them, clifloor (bench/clifloor)
// runs the same two commands linking only what they need (the API client
// and the CLI framework, not the agent, servers, drivers and plugins the
// one berth binary carries), built with the same tags as berth: the part
// of berth's time above clifloor's is the price of one binary, and
// clifloor's own ratio is the floor any berth command starts from.
// clibare (bench/clibare) is the floor below that: the same two commands
// with an API client that links no protobuf and no gRPC (net/http and
// encoding/json). `node status` also waits for the agent's answer, which
// no start-up work can shorten: the section times GET /v1/nodes?stub=true from a
// warm process, a new connection each time, and prints it beside.
// BERTH_CLI_BASE names another berth binary (an earlier commit's) to time
// in the same rounds, against the same agent, for a before/after.
//
// Every program is timed from a copy the section writes into its
// directory: the page cache holds a file the Go linker wrote (through a
// memory map) in small pages, and one written with write() in large ones,
// and on this machine the same bytes started 13-19% faster from a copy. A
// copy is also what a package or an install step leaves.
// Last, the packages whose initialisation costs berth version most, from
// the runtime's trace (median clock over the rounds traced).

type cliPlan struct{ warmup, rounds, traced int }

var (
	fullCLIPlan  = cliPlan{warmup: 5, rounds: 200, traced: 31}
	quickCLIPlan = cliPlan{warmup: 1, rounds: 10, traced: 3}
)

const cliRatioTarget = 3.0

// cliProgram is one command line timed.
type cliProgram struct {
	name string
	argv []string
	// want is text its standard output must hold (checked once, after
	// the warm-up), so a command that fails fast is not timed as fast.
	want string
	// target says the program's ratio to the hello-world is a target.
	target bool
	wall   []time.Duration
	cpu    []time.Duration
}

func benchCLI(opts options) error {
	plan := fullCLIPlan
	if opts.quick {
		plan = quickCLIPlan
	}
	bin, err := berthBinary()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "berth-bench-cli-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	hello, floor, bare, tags, err := buildCLIBaselines(bin, dir)
	if err != nil {
		return err
	}
	agent, err := startDevAgent(bin, false)
	if err != nil {
		return err
	}
	defer agent.stop()
	// Every timed program is a copy written alike (see the section's doc).
	timed, err := copyAlike(dir, map[string]string{"hello": hello, "berth": bin, "clifloor": floor, "clibare": bare, "base": os.Getenv("BERTH_CLI_BASE")})
	if err != nil {
		return err
	}
	hello, floor, bare = timed["hello"], timed["clifloor"], timed["clibare"]
	tbin := timed["berth"]

	progs := []*cliProgram{
		{name: "hello-world (baseline)", argv: []string{hello}, want: "hello, world"},
		{name: "berth version", argv: []string{tbin, "version"}, want: "berth v", target: true},
		{name: "berth node status", argv: []string{tbin, "node", "status", "-address", agent.http}, want: "ready", target: true},
		{name: "clifloor version (floor)", argv: []string{floor, "version"}, want: "berth v"},
		{name: "clifloor node-status (floor)", argv: []string{floor, "node-status", "-address", agent.http}, want: "ready"},
		{name: "clibare version (no protobuf/gRPC)", argv: []string{bare, "version"}, want: "berth v"},
		{name: "clibare node-status (no protobuf/gRPC)", argv: []string{bare, "node-status", "-address", agent.http}, want: "ready"},
	}
	if base := timed["base"]; base != "" {
		// Another berth binary (an earlier commit's), timed in the same
		// rounds: a before/after that the machine's drift cannot skew.
		progs = append(progs,
			&cliProgram{name: "base: berth version", argv: []string{base, "version"}, want: "berth v"},
			&cliProgram{name: "base: berth node status", argv: []string{base, "node", "status", "-address", agent.http}, want: "ready"})
	}
	for range plan.warmup {
		for _, p := range progs {
			if _, _, err := runCLIOnce(p.argv); err != nil {
				return err
			}
		}
	}
	for _, p := range progs {
		out, err := exec.Command(p.argv[0], p.argv[1:]...).Output()
		if err != nil || !strings.Contains(string(out), p.want) {
			return fmt.Errorf("%s: want output holding %q, got %q (%v)", strings.Join(p.argv, " "), p.want, out, err)
		}
	}
	for r := range plan.rounds {
		for i := range progs {
			p := progs[(i+r)%len(progs)]
			wall, cpu, err := runCLIOnce(p.argv)
			if err != nil {
				return err
			}
			p.wall = append(p.wall, wall)
			p.cpu = append(p.cpu, cpu)
		}
	}
	fmt.Printf("berth: %s (built with tags %q); hello-world, clifloor and clibare built in this run; every program timed from a copy written alike; %d rounds, each program once a round in rotated order; whole process, start to exit\n\n",
		bin, tags, plan.rounds)
	fmt.Println("| command | wall median | wall p10 | cpu median | wall ÷ hello-world (median of rounds) | target |")
	fmt.Println("|---|--:|--:|--:|--:|---|")
	base := progs[0]
	failed := false
	for _, p := range progs {
		ratios := make([]float64, len(p.wall))
		for i := range p.wall {
			ratios[i] = float64(p.wall[i]) / float64(base.wall[i])
		}
		ratio := median(ratios)
		verdict := ""
		if p.target {
			verdict = fmt.Sprintf("≤ %.0f×: ", cliRatioTarget)
			if ratio <= cliRatioTarget {
				verdict += "met"
			} else {
				verdict += "NOT met"
				failed = true
			}
		}
		sorted := slices.Clone(p.wall)
		slices.Sort(sorted)
		fmt.Printf("| %s | %s | %s | %s | %.2f× | %s |\n", p.name, cliMs(median(p.wall)), cliMs(percentile(sorted, 0.1)),
			cliMs(median(p.cpu)), ratio, verdict)
	}
	answer, err := agentAnswerTime(agent.http, plan.rounds)
	if err != nil {
		return err
	}
	fmt.Printf("\nthe agent's answer to GET /v1/nodes?stub=true (the list stubs node status asks for), from a warm process, a new connection each time (what node status waits for, any client): median %s, p10 %s\n",
		cliMs(answer[len(answer)/2]), cliMs(answer[len(answer)/10]))
	if err := printCLIInits(tbin, plan.traced); err != nil {
		return err
	}
	if plan == quickCLIPlan {
		fmt.Printf("\n(quick mode: %d rounds, too few for the verdicts to mean anything)\n", plan.rounds)
	}
	if failed {
		fmt.Println("\nA target is not met: see the floors above for what linking only berth's client (clifloor), or a client without protobuf/gRPC (clibare), would cost, and the agent's answer time that node status waits for.")
	}
	return nil
}

// buildCLIBaselines builds the hello-world and clifloor into dir, with
// the Go toolchain and environment of this run; clifloor gets the build
// tags berth's binary was built with (read from the binary).
func buildCLIBaselines(bin, dir string) (hello, floor, bare, tags string, err error) {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return "", "", "", "", fmt.Errorf("reading %s's build information: %w", bin, err)
	}
	for _, s := range info.Settings {
		if s.Key == "-tags" {
			tags = s.Value
		}
	}
	helloDir := filepath.Join(dir, "hello")
	if err := os.Mkdir(helloDir, 0o755); err != nil {
		return "", "", "", "", err
	}
	src := "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello, world\") }\n"
	if err := os.WriteFile(filepath.Join(helloDir, "main.go"), []byte(src), 0o644); err != nil {
		return "", "", "", "", err
	}
	if err := os.WriteFile(filepath.Join(helloDir, "go.mod"), []byte("module hello\n\ngo 1.26\n"), 0o644); err != nil {
		return "", "", "", "", err
	}
	hello = filepath.Join(dir, "hello-world")
	if err := goBuild(helloDir, []string{"GOFLAGS=", "GOWORK=off"}, "-o", hello, "."); err != nil {
		return "", "", "", "", err
	}
	root, err := moduleRoot()
	if err != nil {
		return "", "", "", "", err
	}
	floor = filepath.Join(dir, "clifloor")
	if err := goBuild(root, nil, "-tags", tags, "-o", floor, "./bench/clifloor"); err != nil {
		return "", "", "", "", err
	}
	bare = filepath.Join(dir, "clibare")
	if err := goBuild(root, nil, "-tags", tags, "-o", bare, "./bench/clibare"); err != nil {
		return "", "", "", "", err
	}
	return hello, floor, bare, tags, nil
}

// copyAlike copies each named binary (an empty path is skipped) into
// dir/timed-NAME with write(), so every timed program starts from page
// cache filled the same way.
func copyAlike(dir string, bins map[string]string) (map[string]string, error) {
	out := map[string]string{}
	for name, src := range bins {
		if src == "" {
			continue
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return nil, err
		}
		dst := filepath.Join(dir, "timed-"+name)
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			return nil, err
		}
		out[name] = dst
	}
	return out, nil
}

// agentAnswerTime times n requests for the node list from this process,
// each on a new connection, as a command line's one request is; sorted.
func agentAnswerTime(addr string, n int) ([]time.Duration, error) {
	ds := make([]time.Duration, 0, n)
	for range n {
		tr := &http.Transport{}
		start := time.Now()
		resp, err := (&http.Client{Transport: tr}).Get("http://" + addr + "/v1/nodes?per_page=1000&stub=true")
		if err != nil {
			return nil, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		ds = append(ds, time.Since(start))
		tr.CloseIdleConnections()
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("GET /v1/nodes?stub=true: %s", resp.Status)
		}
	}
	slices.Sort(ds)
	return ds, nil
}

// runCLIOnce runs argv to its exit, its output discarded, and returns
// its wall time (start to reaped) and CPU time (user + system).
func runCLIOnce(argv []string) (wall, cpu time.Duration, err error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	start := time.Now()
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return 0, 0, fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
		}
		return 0, 0, err
	}
	wall = time.Since(start)
	return wall, cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), nil
}

// printCLIInits prints the packages whose initialisation costs berth
// version most, medians over n traced runs, and the total.
func printCLIInits(bin string, n int) error {
	clocks := map[string][]time.Duration{}
	var totals []time.Duration
	var allocs []int64
	for range n {
		inits, err := inittrace.Run(bin, "version")
		if err != nil {
			return err
		}
		var total time.Duration
		var a int64
		for _, in := range inits {
			clocks[in.Package] = append(clocks[in.Package], in.Clock)
			total += in.Clock
			a += in.Allocs
		}
		totals = append(totals, total)
		allocs = append(allocs, a)
	}
	type pkgClock struct {
		pkg   string
		clock time.Duration
	}
	var pkgs []pkgClock
	for p, cs := range clocks {
		pkgs = append(pkgs, pkgClock{p, median(cs)})
	}
	slices.SortFunc(pkgs, func(a, b pkgClock) int { return int(b.clock - a.clock) })
	fmt.Printf("\nberth version's package initialisation (GODEBUG=inittrace=1, medians of %d runs; the trace's own printing inflates it): %d packages, %s in all, %d allocations\n\n",
		n, len(clocks), cliMs(median(totals)), median(allocs))
	fmt.Println("| package | init clock |")
	fmt.Println("|---|--:|")
	for _, p := range pkgs[:min(12, len(pkgs))] {
		fmt.Printf("| %s | %s |\n", p.pkg, cliMs(p.clock))
	}
	return nil
}

func cliMs(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}
