package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"berth.dev/berth/host/server"
	"berth.dev/berth/rpc/api"
)

// The ui section measures the web UI's pages on a dev agent (`berth run
// -dev`, this tree's binary) holding the volumes section's large state
// (1,000 nodes, 10,000 volumes, 100,000 allocs, built through the FSM by
// volumes_state.go), restored into it the way an operator restores one:
// the state's snapshot written as a `berth operator snapshot save`
// archive and PUT to /v1/operator/snapshot (`operator snapshot restore`),
// so the agent's raft, FSM and state store hold it as if its commands had
// been applied there. The large state's nodes have no clients; the agent
// runs with a heartbeat grace of an hour so the leader does not mark them
// down (and reschedule 100,000 allocs) while the pages are measured, as a
// cluster whose clients heartbeat would not.
//
// A page load is what a browser's first visit fetches, over HTTP/1.1 on
// loopback: the page's HTML, then the static files it references
// (stylesheet, script, icon), on up to six connections, as a browser
// does, with Accept-Encoding: gzip. Its time runs from the first dial to
// the last byte of the last file; its bytes are every byte read from the
// sockets (status lines, headers and bodies, compressed if the agent
// compresses). The live fragment the script then asks for blocks until
// the state changes, so it is not part of the load. Targets: every page
// loads in under 1 s (median and p90) and stays under 300 KB.

const (
	uiTimeTarget  = time.Second
	uiBytesTarget = 300 * 1000
)

type uiPlan struct {
	state volumeState
	// reps is how many loads of each page are measured, rounds of one load
	// of every page in turn, after one round not measured (the first).
	reps int
}

var (
	fullUIPlan  = uiPlan{state: fullVolPlan.large, reps: 20}
	quickUIPlan = uiPlan{state: quickVolPlan.large, reps: 3}
)

// uiPage is one page measured.
type uiPage struct{ name, path string }

// uiLoad is one page load.
type uiLoad struct {
	ttlb time.Duration
	// wire is every byte read from the sockets; html is the page's body
	// as received; files is how many static files it referenced.
	wire, html int64
	files      int
	body       []byte
}

type uiReport struct {
	plan             uiPlan
	built            *builtState
	build, restore   time.Duration
	archive          int
	nodes, volumes   int
	pages            []uiPage
	first            map[string]uiLoad
	loads            map[string][]uiLoad
	contentEncodings []string
}

func benchUI(opts options) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	bin, err := berthBinary()
	if err != nil {
		return err
	}
	plan := fullUIPlan
	if opts.quick {
		plan = quickUIPlan
	}
	rep, err := measureUI(ctx, bin, plan)
	if err != nil {
		return err
	}
	return rep.print(os.Stdout, opts.quick)
}

func measureUI(ctx context.Context, bin string, plan uiPlan) (_ *uiReport, err error) {
	rep := &uiReport{plan: plan, first: map[string]uiLoad{}, loads: map[string][]uiLoad{}}
	st := plan.state
	fmt.Fprintf(os.Stderr, "ui: building the state through the FSM (%d nodes, %d volumes, %d allocs)\n",
		st.nodes, st.volumes, st.jobs*st.allocsPerJob)
	start := time.Now()
	if rep.built, err = st.build(); err != nil {
		return nil, fmt.Errorf("building the state: %w", err)
	}
	rep.build = time.Since(start)
	var archive bytes.Buffer
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, ID: "bench-ui", Index: rep.built.index, Term: 1,
		Size: int64(len(rep.built.snapshot))}
	if err := server.WriteSnapshotArchive(&archive, meta, bytes.NewReader(rep.built.snapshot)); err != nil {
		return nil, fmt.Errorf("writing the snapshot archive: %w", err)
	}
	rep.archive = archive.Len()

	a, err := startDevAgentWith(bin, false, "server {\n  heartbeat_grace = \"1h\"\n}\n")
	if err != nil {
		return nil, err
	}
	defer a.stop()
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w (agent log: %s)", err, a.logPath)
		}
	}()
	c, err := api.NewClient("http://" + a.http)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "ui: restoring the %.1f MB archive into the dev agent\n", float64(rep.archive)/1e6)
	start = time.Now()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	_, err = c.SnapshotRestore(rctx, bytes.NewReader(archive.Bytes()))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("restoring the state into the dev agent: %w", err)
	}
	rep.restore = time.Since(start)
	if err := rep.checkRestored(ctx, c); err != nil {
		return nil, err
	}
	if rep.pages, err = uiPages(ctx, c, st); err != nil {
		return nil, err
	}

	base := "http://" + a.http
	encodings := map[string]bool{}
	for round := range plan.reps + 1 {
		for _, p := range rep.pages {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			l, enc, err := loadUIPage(ctx, base, p.path)
			if err != nil {
				return nil, fmt.Errorf("%s page (%s): %w", p.name, p.path, err)
			}
			for _, e := range enc {
				encodings[e] = true
			}
			if round == 0 {
				rep.first[p.name] = l
				continue
			}
			l.body = nil
			rep.loads[p.name] = append(rep.loads[p.name], l)
		}
	}
	for e := range encodings {
		rep.contentEncodings = append(rep.contentEncodings, e)
	}
	slices.Sort(rep.contentEncodings)
	return rep, nil
}

// checkRestored reads back through the API that the agent holds the
// built state: every node (beside the dev agent's own, which registers
// again after the restore) and every volume.
func (r *uiReport) checkRestored(ctx context.Context, c *api.Client) error {
	nodes, _, err := api.AllPages(ctx, &api.QueryOptions{PerPage: 1000}, c.Nodes)
	if err != nil {
		return fmt.Errorf("listing nodes after the restore: %w", err)
	}
	vols, _, err := api.AllPages(ctx, &api.QueryOptions{PerPage: 1000}, c.Volumes().List)
	if err != nil {
		return fmt.Errorf("listing volumes after the restore: %w", err)
	}
	r.nodes, r.volumes = len(nodes), len(vols)
	if r.nodes < r.built.nodes || r.volumes != r.built.volumes {
		return fmt.Errorf("after the restore the agent lists %d nodes and %d volumes, want at least %d and %d",
			r.nodes, r.volumes, r.built.nodes, r.built.volumes)
	}
	return nil
}

// uiPages is the pages measured: every list, and one job, alloc, node and
// volume of the state (a job of 1,000 allocs, a node running 100, a
// volume with a claim).
func uiPages(ctx context.Context, c *api.Client, st volumeState) ([]uiPage, error) {
	job := fmt.Sprintf("job-%03d", st.jobs/2)
	allocs, _, err := c.Jobs().Allocations(ctx, job, &api.QueryOptions{PerPage: 1})
	if err != nil || len(allocs) == 0 {
		return nil, errors.Join(fmt.Errorf("job %s has no allocs after the restore", job), err)
	}
	return []uiPage{
		{"overview", "/ui/"},
		{"jobs", "/ui/jobs"},
		{"nodes", "/ui/nodes"},
		{"volumes", "/ui/volumes"},
		{"plugins", "/ui/plugins"},
		{"job", "/ui/jobs/" + job},
		{"alloc", "/ui/allocs/" + allocs[0].GetId()},
		{"node", "/ui/nodes/" + volumeNodeID(7%max(st.nodes, 1))},
		{"volume", "/ui/volumes/vol-00000"},
	}, nil
}

// staticRef finds the files a page references from the agent.
var staticRef = regexp.MustCompile(`(?:href|src)="(/ui/static/[^"]+)"`)

// loadUIPage loads path and the static files its HTML references on a
// fresh client (a first visit: no connection, no cache), returning the
// load and the Content-Encodings the agent answered with.
func loadUIPage(ctx context.Context, base, path string) (uiLoad, []string, error) {
	var wire atomic.Int64
	dialer := &net.Dialer{}
	tr := &http.Transport{
		DisableCompression: true, // the bytes counted are the bytes sent
		MaxConnsPerHost:    6,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &countingConn{Conn: conn, n: &wire}, nil
		},
	}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: time.Minute}
	var mu sync.Mutex
	var encs []string
	get := func(p string) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+p, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("GET %s: HTTP %d: %.300s", p, resp.StatusCode, b)
		}
		if e := resp.Header.Get("Content-Encoding"); e != "" {
			mu.Lock()
			encs = append(encs, e)
			mu.Unlock()
		}
		return b, nil
	}
	start := time.Now()
	html, err := get(path)
	if err != nil {
		return uiLoad{}, nil, err
	}
	var refs []string
	for _, m := range staticRef.FindAllSubmatch(html, -1) {
		if ref := string(m[1]); !slices.Contains(refs, ref) {
			refs = append(refs, ref)
		}
	}
	errs := make([]error, len(refs))
	var wg sync.WaitGroup
	for i, ref := range refs {
		wg.Go(func() { _, errs[i] = get(ref) })
	}
	wg.Wait()
	ttlb := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return uiLoad{}, nil, err
	}
	return uiLoad{ttlb: ttlb, wire: wire.Load(), html: int64(len(html)), files: len(refs), body: html}, encs, nil
}

// countingConn counts the bytes read from a connection.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// met reports whether every measured load of page met both targets.
func (r *uiReport) met(page string) (timeOK, bytesOK bool) {
	ls := r.loads[page]
	ts := make([]time.Duration, len(ls))
	var most int64
	for i, l := range ls {
		ts[i] = l.ttlb
		most = max(most, l.wire)
	}
	slices.Sort(ts)
	return percentile(ts, 0.9) < uiTimeTarget, most < uiBytesTarget
}

func (r *uiReport) print(w io.Writer, quick bool) error {
	var b strings.Builder
	st := r.built
	fmt.Fprintf(&b, "Dev agent (`berth run -dev`) holding %d nodes, %d volumes, %d allocs (%d claims), "+
		"restored from a %.1f MB snapshot archive through PUT /v1/operator/snapshot in %s (state built through the FSM in %s); "+
		"the API then lists %d nodes and %d volumes.\n\n",
		st.nodes, st.volumes, st.allocs, st.claims, float64(r.archive)/1e6, fmtLatency(r.restore), fmtLatency(r.build), r.nodes, r.volumes)
	fmt.Fprintf(&b, "| page | path | files | first load | median | p90 | bytes on the wire | HTML | verdict (< 1 s, < 300 KB) |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|\n")
	allMet := true
	for _, p := range r.pages {
		ls := r.loads[p.name]
		ts := make([]time.Duration, len(ls))
		var wire, html int64
		for i, l := range ls {
			ts[i] = l.ttlb
			wire, html = max(wire, l.wire), max(html, l.html)
		}
		slices.Sort(ts)
		timeOK, bytesOK := r.met(p.name)
		v := "meets"
		switch {
		case !timeOK && !bytesOK:
			v = "MISSES both"
		case !timeOK:
			v = "MISSES the time"
		case !bytesOK:
			v = "MISSES the size"
		}
		allMet = allMet && timeOK && bytesOK
		fmt.Fprintf(&b, "| %s | `%s` | %d | %s | %s | %s | %.1f KB | %.1f KB | %s |\n", p.name, p.path, r.first[p.name].files,
			fmtLatency(r.first[p.name].ttlb), fmtLatency(medianDur(ts)), fmtLatency(percentile(ts, 0.9)),
			float64(wire)/1000, float64(html)/1000, v)
	}
	enc := "none (identity)"
	if len(r.contentEncodings) > 0 {
		enc = strings.Join(r.contentEncodings, ", ")
	}
	fmt.Fprintf(&b, "\n%d measured loads of each page, rounds of every page in turn, after a first round shown apart. "+
		"A load is a first visit on loopback: the HTML, then its static files on up to 6 connections, fresh connections and no cache; "+
		"time to the last byte of the last file; bytes are everything read from the sockets (the largest load), Content-Encoding: %s. "+
		"Overall: %s.\n", r.plan.reps, enc, map[bool]string{true: "every page meets both targets", false: "a page MISSES a target"}[allMet])
	if quick {
		b.WriteString("(quick run: a small state, few loads; the figures are not the section's.)\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
