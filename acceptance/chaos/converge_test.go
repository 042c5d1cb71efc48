package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// pendingSet is what is not yet where the test wants it after the last
// heal: a key naming one thing (a job, a claim, an operator claim, the
// plugin, the leader) → how it stands now.
type pendingSet map[string]string

// convergence is how a run came to its wanted state after the last heal.
type convergence struct {
	took   time.Duration // the last heal → everything held
	settle time.Duration // of which: asking every consumer's wanted state again
	// slowest is the key that held last ("" when all held at the first
	// look), why how it stood at its last look before it held.
	slowest, why string
	// timeline is every change of every key, relative to the last heal.
	timeline []string
}

// String is the run's converge line: how long, and what was last.
func (v convergence) String() string {
	s := fmt.Sprintf("converged %s after the last heal (re-asking the wanted states took %s)", v.took.Round(time.Millisecond), v.settle.Round(time.Millisecond))
	if v.slowest != "" {
		s += fmt.Sprintf("; slowest: %s (last seen: %s)", v.slowest, v.why)
	}
	return s
}

// convergeTracker follows the pending sets of successive looks and keeps
// when each key last stood apart.
type convergeTracker struct {
	healed    time.Time
	last      pendingSet
	firstSeen map[string]time.Time
	lastSeen  map[string]time.Time
	lastWhy   map[string]string
	timeline  []string
}

func newConvergeTracker(healed time.Time) *convergeTracker {
	return &convergeTracker{healed: healed, last: pendingSet{}, firstSeen: map[string]time.Time{}, lastSeen: map[string]time.Time{}, lastWhy: map[string]string{}}
}

func (tr *convergeTracker) note(at time.Time, format string, args ...any) {
	tr.timeline = append(tr.timeline, fmt.Sprintf("+%.3fs %s", at.Sub(tr.healed).Seconds(), fmt.Sprintf(format, args...)))
}

// look records one look's pending set taken at at.
func (tr *convergeTracker) look(at time.Time, p pendingSet) {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if tr.last[k] != p[k] {
			tr.note(at, "%s: %s", k, p[k])
		}
		if _, ok := tr.firstSeen[k]; !ok {
			tr.firstSeen[k] = at
		}
		tr.lastSeen[k] = at
		tr.lastWhy[k] = p[k]
	}
	var gone []string
	for k := range tr.last {
		if _, ok := p[k]; !ok {
			gone = append(gone, k)
		}
	}
	slices.Sort(gone)
	for _, k := range gone {
		tr.note(at, "%s: holds", k)
	}
	tr.last = p
}

// result is the convergence once the last look found nothing pending.
func (tr *convergeTracker) result(at time.Time, settle time.Duration) convergence {
	v := convergence{took: at.Sub(tr.healed), settle: settle, timeline: tr.timeline}
	// The key seen pending last; of those seen last at the same look, the
	// one pending the longest, then a job before a claim (a job waits, its
	// new alloc's claim follows it), then by name.
	var latest, since time.Time
	before := func(k, than string) bool {
		kj, tj := strings.HasPrefix(k, "job "), strings.HasPrefix(than, "job ")
		if kj != tj {
			return kj
		}
		return k < than
	}
	for k, t := range tr.lastSeen {
		f := tr.firstSeen[k]
		if t.After(latest) || t.Equal(latest) && (f.Before(since) || f.Equal(since) && before(k, v.slowest)) {
			latest, since, v.slowest, v.why = t, f, k, tr.lastWhy[k]
		}
	}
	return v
}

// converge asks again for every consumer's wanted state, releases what
// operator claims are left (answers lost to faults), and waits until
// deadline for: every wanted consumer with one alloc running and its claim
// in use, every stopped one with none running, no other claim on any
// volume, and the plugin healthy everywhere. It returns how that came to
// hold: when, what held last, every change on the way.
func (w *workload) converge(healed, deadline time.Time) (convergence, error) {
	c := w.c
	tr := newConvergeTracker(healed)
	_ = waitFor(time.Until(deadline), w.settle)
	settled := time.Now()
	tr.note(settled, "every consumer's wanted state asked again")
	for time.Now().Before(deadline) {
		at := time.Now()
		p := w.converged()
		tr.look(at, p)
		if len(p) == 0 {
			return tr.result(at, settled.Sub(healed)), nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	var claims []apiClaim
	_ = c.get(c.api(), "/v1/volumes/claims", &claims)
	v := tr.result(time.Now(), settled.Sub(healed))
	var still []string
	for k, why := range tr.last {
		still = append(still, k+": "+why)
	}
	slices.Sort(still)
	return v, fmt.Errorf("%s (claims now: %+v)", strings.Join(still, "; "), claims)
}

// shortID is an alloc's or claim's ID as the timeline shows it.
func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// converged looks once at the cluster and says what is not yet where the
// test wants it (nothing: converged).
func (w *workload) converged() pendingSet {
	c := w.c
	p := pendingSet{}
	l, err := c.leader()
	if err != nil {
		p["leader"] = err.Error()
		return p
	}
	var claims []apiClaim
	if err := c.get(l, "/v1/volumes/claims?consistent", &claims); err != nil {
		p["claims"] = err.Error()
		return p
	}
	// Operator claims left by lost answers are released (recorded in the
	// history as a sweep's releases).
	for _, cl := range claims {
		if cl.Operator && cl.State != "releasing" && cl.State != "node-detached" {
			r := claimRecord{client: 99, kind: "release", volume: cl.VolumeID, id: cl.ID, call: w.ops.now()}
			err := c.do(context.Background(), l, "DELETE", "/v1/volume/csi/"+cl.VolumeID+"/claims/"+cl.ID, nil, nil)
			r.ret = w.ops.now()
			r.code, r.uncertain = codeOf(err)
			w.ops.add(r)
		}
		if cl.Operator {
			p[fmt.Sprintf("operator claim %s on %s", cl.ID, cl.VolumeID)] = cl.State
		}
	}
	byAlloc := map[string]apiClaim{}
	for _, cl := range claims {
		if !cl.Operator {
			byAlloc[cl.AllocID] = cl
		}
	}
	nodeName := map[string]string{}
	for name, id := range w.nodeIDs {
		nodeName[id] = name
	}
	used := map[string]bool{}
	for _, k := range w.consumers {
		key := "job " + k.id
		var allocs []apiAlloc
		if err := c.get(l, "/v1/job/"+k.id+"/allocations", &allocs); err != nil {
			if k.running {
				p[key] = err.Error()
			}
			continue
		}
		var live []apiAlloc
		var shown []string
		for _, a := range allocs {
			if a.ClientStatus == "running" || a.ClientStatus == "pending" {
				live = append(live, a)
				shown = append(shown, fmt.Sprintf("%s on %s %s/%s", shortID(a.ID), nodeName[a.NodeID], a.ClientStatus, a.DesiredStatus))
			}
		}
		switch {
		case !k.running && len(live) > 0:
			p[key] = fmt.Sprintf("stopped, live allocs [%s]", strings.Join(shown, ", "))
		case k.running && len(live) == 0:
			p[key] = "wants one running alloc, none live" + w.lastAllocWait(l, allocs, nodeName)
		case k.running && (len(live) != 1 || live[0].ClientStatus != "running" || live[0].DesiredStatus != "run"):
			p[key] = fmt.Sprintf("wants one running alloc, live [%s]", strings.Join(shown, ", "))
		case k.running:
			a := live[0]
			cl, ok := byAlloc[a.ID]
			switch {
			case !ok:
				p[key] = fmt.Sprintf("alloc %s on %s running without a claim", shortID(a.ID), nodeName[a.NodeID])
			case cl.State != "in-use":
				p[key] = fmt.Sprintf("alloc %s on %s running, its claim %s", shortID(a.ID), nodeName[a.NodeID], cl.State)
			}
			used[a.ID] = true
		}
	}
	for id, cl := range byAlloc {
		if !used[id] {
			p[fmt.Sprintf("claim of alloc %s on %s", shortID(id), cl.VolumeID)] = cl.State + ", its alloc not a running consumer"
		}
	}
	var pl struct {
		ControllersHealthy int `json:"controllers_healthy"`
		NodesHealthy       int `json:"nodes_healthy"`
	}
	if err := c.get(l, "/v1/plugin/csi/"+plugin, &pl); err != nil {
		p["plugin "+plugin] = err.Error()
	} else if pl.ControllersHealthy != 1 || pl.NodesHealthy != len(c.clients) {
		p["plugin "+plugin] = fmt.Sprintf("%d controllers and %d nodes healthy", pl.ControllersHealthy, pl.NodesHealthy)
	}
	return p
}

// showSlowest logs, for a slow or failed convergence, the allocs behind
// the key that held last (a job's allocs, a claim's alloc) as `berth
// alloc status` shows them: their tasks' states and events.
func (w *workload) showSlowest(key string) {
	c := w.c
	var ids []string
	switch {
	case strings.HasPrefix(key, "job "):
		var allocs []apiAlloc
		if err := c.get(c.api(), "/v1/job/"+strings.TrimPrefix(key, "job ")+"/allocations", &allocs); err != nil {
			w.t.Logf("%s: %v", key, err)
			return
		}
		for _, a := range allocs {
			ids = append(ids, a.ID)
		}
		ids = ids[max(0, len(ids)-3):]
	case strings.HasPrefix(key, "claim of alloc "):
		ids = append(ids, strings.Fields(strings.TrimPrefix(key, "claim of alloc "))[0])
	default:
		return
	}
	for _, id := range ids {
		out, err := c.cli(c.api(), "alloc", "status", id)
		if err != nil {
			out += " (" + err.Error() + ")"
		}
		// Each line behind "| ": make chaos drops lines that begin with a
		// date (agents' log lines), as the events' times do.
		out = "| " + strings.ReplaceAll(strings.TrimRight(out, "\n"), "\n", "\n| ")
		w.t.Logf("%s, alloc status %s:\n%s", key, id, out)
	}
}

// lastAllocWait says what a job without a live alloc waits on when its
// newest alloc failed and its replacement is held back by the group's
// reschedule policy (a delayed follow-up evaluation): the failure and when
// the replacement is due. Anything else says nothing.
func (w *workload) lastAllocWait(l *agent, allocs []apiAlloc, nodeName map[string]string) string {
	var last *apiAlloc
	for i := range allocs {
		if last == nil || allocs[i].CreateIndex > last.CreateIndex {
			last = &allocs[i]
		}
	}
	if last == nil || last.ClientStatus != "failed" || last.NextAllocation != "" {
		return ""
	}
	s := fmt.Sprintf("; alloc %s on %s failed (%s)", shortID(last.ID), nodeName[last.NodeID], last.ClientDescription)
	if last.FollowupEvalID == "" {
		return s
	}
	var ev struct {
		Status    string `json:"status"`
		WaitUntil int64  `json:"wait_until"`
	}
	if err := w.c.get(l, "/v1/evaluation/"+last.FollowupEvalID, &ev); err != nil || ev.WaitUntil == 0 {
		return s
	}
	return s + fmt.Sprintf(", its replacement waits for the reschedule policy's delay: eval %s %s until %s", shortID(last.FollowupEvalID), ev.Status, time.Unix(0, ev.WaitUntil).Format("15:04:05.000"))
}

// failedAllocs counts the run's failed allocs (each one a reschedule
// policy's wait before its replacement), -1 when no server answers.
func (w *workload) failedAllocs() int {
	b, err := w.c.rawAll(w.c.api(), "/v1/allocations")
	if err != nil {
		return -1
	}
	var allocs []apiAlloc
	if err := json.Unmarshal(b, &allocs); err != nil {
		return -1
	}
	n := 0
	for _, a := range allocs {
		if a.ClientStatus == "failed" {
			n++
		}
	}
	return n
}

// rawAll reads every page of a list (lists answer 100 items a page unless
// asked, and a run makes some hundreds of allocs and evaluations) as one
// JSON array.
func (c *cluster) rawAll(a *agent, path string) ([]byte, error) {
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	var items []json.RawMessage
	token := ""
	for {
		p := path + sep + "per_page=1000"
		if token != "" {
			p += "&next_token=" + url.QueryEscape(token)
		}
		resp, err := c.http.Get(a.url(p))
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("%s GET %s: HTTP %d: %s", a.name, p, resp.StatusCode, b)
		}
		var page []json.RawMessage
		if err := json.Unmarshal(b, &page); err != nil {
			return nil, fmt.Errorf("%s GET %s: %w", a.name, p, err)
		}
		items = append(items, page...)
		if token = resp.Header.Get("X-Berth-NextToken"); token == "" {
			return json.Marshal(items)
		}
	}
}
