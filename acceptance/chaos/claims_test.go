package chaos

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// claimRecord is one operator claim operation as a client of the API saw
// it: called and returned (nanoseconds since the run's start), with the
// answer's error code ("" for ok) or uncertain (no answer: a timeout, a
// connection lost, an unavailable server — it may have taken effect).
type claimRecord struct {
	client    int
	kind      string // claim, release, gone (a consistent read no longer lists it)
	volume    string
	id        string // the claim; "?n" for a claim whose answer was lost
	node      string
	write     bool
	call, ret int64
	code      string
	uncertain bool
}

// history is the run's claim operations.
type history struct {
	start time.Time
	mu    sync.Mutex
	ops   []claimRecord
	// seen: claims a consistent read listed, with when it was called.
	seen    map[string]int64
	gone    map[string]bool
	matched map[string]bool // uncertain claims a read found, by ID
	unknown int
}

func newHistory() *history {
	return &history{start: time.Now(), seen: map[string]int64{}, gone: map[string]bool{}, matched: map[string]bool{}}
}

func (h *history) now() int64 { return int64(time.Since(h.start)) }

func (h *history) add(r claimRecord) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, r)
}

func (h *history) records() []claimRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ops)
}

type apiClaim struct {
	ID       string `json:"id"`
	VolumeID string `json:"volume_id"`
	AllocID  string `json:"alloc_id"`
	NodeID   string `json:"node_id"`
	Mode     string `json:"mode"`
	State    string `json:"state"`
	Operator bool   `json:"operator"`
}

// codeOf is the API error's code, or uncertain.
func codeOf(err error) (code string, uncertain bool) {
	if err == nil {
		return "", false
	}
	var ae *apiError
	if !errors.As(err, &ae) {
		return "", true
	}
	switch ae.Code {
	case "unavailable", "deadline_exceeded", "aborted", "canceled", "unknown", "internal":
		return ae.Code, true
	}
	return ae.Code, false
}

// claimer is one operator: claims a volume on a node, holds it a moment,
// releases it, until ctx ends; then releases what it holds.
func (w *workload) claimer(ctx context.Context, client int, rng *rand.Rand) {
	type held struct{ volume, id string }
	var mine []held
	nodes := make([]string, 0, len(w.nodeIDs))
	for _, name := range []string{"c1", "c2", "c3"} {
		nodes = append(nodes, w.nodeIDs[name])
	}
	release := func(h held) bool {
		r := claimRecord{client: client, kind: "release", volume: h.volume, id: h.id, call: w.ops.now()}
		err := w.c.do(context.Background(), w.pickServer(rng), "DELETE", "/v1/volume/csi/"+h.volume+"/claims/"+h.id, nil, nil)
		r.ret = w.ops.now()
		r.code, r.uncertain = codeOf(err)
		w.ops.add(r)
		w.mu.Lock()
		w.count["release"]++
		w.mu.Unlock()
		return err == nil || r.code == "not_found"
	}
	for ctx.Err() == nil {
		if len(mine) > 0 && rng.IntN(2) == 0 {
			k := rng.IntN(len(mine))
			if release(mine[k]) {
				mine = slices.Delete(mine, k, k+1)
			}
		} else {
			v := claimVolumes[rng.IntN(len(claimVolumes))].id
			r := claimRecord{client: client, kind: "claim", volume: v, node: nodes[rng.IntN(len(nodes))], write: rng.IntN(3) > 0}
			mode := "read"
			if r.write {
				mode = "write"
			}
			var resp struct {
				Claim apiClaim `json:"claim"`
			}
			r.call = w.ops.now()
			err := w.c.do(context.Background(), w.pickServer(rng), "POST", "/v1/volume/csi/"+v+"/claims", map[string]string{"volume_id": v, "node_id": r.node, "mode": mode}, &resp)
			r.ret = w.ops.now()
			r.code, r.uncertain = codeOf(err)
			r.id = resp.Claim.ID
			if r.uncertain {
				w.ops.mu.Lock()
				w.ops.unknown++
				r.id = "?" + string(rune('a'+client)) + itoa(w.ops.unknown)
				w.ops.mu.Unlock()
			}
			w.ops.add(r)
			w.mu.Lock()
			w.count["claim"]++
			w.mu.Unlock()
			if err == nil {
				mine = append(mine, held{v, r.id})
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(200+rng.IntN(800)) * time.Millisecond):
		}
	}
	for _, h := range mine {
		_ = waitFor(20*time.Second, func() error {
			if release(h) {
				return nil
			}
			return errors.New("not released")
		})
	}
}

func itoa(n int) string {
	b := []byte{}
	for {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
		if n == 0 {
			return string(b)
		}
	}
}

// pickServer is a random server that runs (a request to a partitioned or
// stopped one is a request a real operator could make, and is uncertain).
func (w *workload) pickServer(rng *rand.Rand) *agent {
	var up []*agent
	for _, s := range w.c.servers {
		if s.running() {
			up = append(up, s)
		}
	}
	if len(up) == 0 {
		return w.c.servers[0]
	}
	return up[rng.IntN(len(up))]
}

// observe lists the operator claims with a consistent read until ctx
// ends: a claim the history knows that is listed no more was freed
// between the last read that listed it and this one (a "gone" operation);
// a listed claim the history does not know is an uncertain claim that took
// effect (orphans, released by the final sweep).
func (w *workload) observe(ctx context.Context, rng *rand.Rand) {
	for ctx.Err() == nil {
		w.observeOnce(rng)
		select {
		case <-ctx.Done():
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// observeOnce reads once; it returns the operator claims listed, or nil on
// an error.
func (w *workload) observeOnce(rng *rand.Rand) []apiClaim {
	ctx, cancel := context.WithTimeout(context.Background(), observeTimeout)
	defer cancel()
	list, _ := w.observeFrom(ctx, w.pickServer(rng))
	return list
}

// observeTimeout bounds one of the observer's reads: a read sent to a
// partitioned or stopped server gives up and the next goes elsewhere,
// rather than leaving the observer blind for the HTTP client's 5s (the
// longer no read answers, the wider a "gone" window, the weaker the check).
const observeTimeout = 1500 * time.Millisecond

// observeFrom reads the operator claims from s with a consistent read and
// records what the read tells the history.
func (w *workload) observeFrom(ctx context.Context, s *agent) ([]apiClaim, error) {
	call := w.ops.now()
	var list []apiClaim
	if err := w.c.do(ctx, s, "GET", "/v1/volumes/claims?operator=true&consistent", nil, &list); err != nil {
		return nil, err
	}
	w.ops.observed(list, call, w.ops.now())
	return list, nil
}

// observeLast is the history's last observation, once the operators have
// stopped: a consistent read that must come (from any server, within
// 20s), so every claim freed since the observer's last read has its
// "gone". Without it a free the observer missed — its reads hung on a
// partitioned server for the workload's last seconds — leaves the claim
// held in the model, and a later claim that the free made room for is
// refused by the model though the servers granted it rightly (seed 3034).
func (w *workload) observeLast() error {
	return waitFor(20*time.Second, func() error {
		var errs []error
		for _, s := range w.c.servers {
			if _, err := w.observeFrom(context.Background(), s); err != nil {
				errs = append(errs, err)
				continue
			}
			return nil
		}
		return errors.Join(errs...)
	})
}

// observed records what a consistent read, called at call and returned at
// ret, that listed list tells: the uncertain claims that took effect, and
// the known claims freed since the last read that listed them.
func (h *history) observed(list []apiClaim, call, ret int64) {
	listed := map[string]bool{}
	for _, c := range list {
		listed[c.ID] = true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	known := map[string]claimRecord{}
	for _, r := range h.ops {
		if r.kind == "claim" && r.code == "" && !r.uncertain && r.ret < call {
			known[r.id] = r
		}
	}
	// A listed claim nobody was told of is an uncertain claim that took
	// effect: the earliest unmatched one of the same volume, node and mode
	// called before this read returned takes its ID.
	for _, c := range list {
		if _, ok := known[c.ID]; ok || h.matched[c.ID] {
			continue
		}
		for i := range h.ops {
			r := &h.ops[i]
			if r.kind == "claim" && r.uncertain && r.id[0] == '?' && r.volume == c.VolumeID && r.node == c.NodeID && r.write == (c.Mode == "write") && r.call < ret {
				r.id = c.ID
				h.matched[c.ID] = true
				break
			}
		}
	}
	for _, r := range h.ops {
		if r.kind == "claim" && r.uncertain && h.matched[r.id] {
			known[r.id] = r
		}
	}
	for id, r := range known {
		if listed[id] || h.gone[id] {
			continue
		}
		from := r.call
		if s, ok := h.seen[id]; ok {
			from = s
		}
		h.gone[id] = true
		h.ops = append(h.ops, claimRecord{client: 100, kind: "gone", volume: r.volume, id: id, node: r.node, call: from, ret: ret})
	}
	for _, c := range list {
		h.seen[c.ID] = call
	}
}
