package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
)

// fakeAPI serves the API reads the UI makes from fixtures, with blocking
// queries on one index for everything (?index= waits until it passes), and
// refuses the routes in deny with the API's 403.
type fakeAPI struct {
	mu      sync.Mutex
	index   uint64
	changed chan struct{}

	nodes   []*pb.Node
	jobs    []*pb.Job
	allocs  []*pb.Allocation
	evals   []*pb.Evaluation
	plugins []*pb.CSIPlugin
	volumes []*pb.VolumeView
	servers []*pb.RaftServer
	// deny maps an API route pattern to the capability a 403 names;
	// a request with token is not denied.
	deny  map[string]string
	token string
	// calls counts requests by route pattern.
	calls map[string]int
	// hold, when set, holds every page-sized read of the node list (a
	// page's load, not a watch's one-item read) until it is closed.
	hold chan struct{}
}

func newFakeAPI() *fakeAPI {
	return &fakeAPI{index: 10, changed: make(chan struct{}), deny: map[string]string{}, calls: map[string]int{}}
}

// bump is a change of the state: blocking reads answer.
func (f *fakeAPI) bump(change func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if change != nil {
		change()
	}
	f.index++
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeAPI) handler() http.Handler {
	mux := http.NewServeMux()
	route := func(pattern string, read func(r *http.Request) (any, bool)) {
		mux.HandleFunc("GET "+pattern, func(w http.ResponseWriter, r *http.Request) {
			f.mu.Lock()
			f.calls[pattern]++
			capability, denied := f.deny[pattern]
			hold := f.hold
			if f.token != "" && r.Header.Get("X-Berth-Token") == f.token {
				denied = false
			}
			f.mu.Unlock()
			if denied {
				apiError(w, http.StatusForbidden, "permission_denied", "Permission denied: the token's policies do not grant "+capability)
				return
			}
			if hold != nil && pattern == "/v1/nodes" && r.URL.Query().Get("per_page") != "1" {
				<-hold
			}
			if s := r.URL.Query().Get("index"); s != "" {
				min, _ := strconv.ParseUint(s, 10, 64)
				if !f.wait(r.Context(), min) {
					return
				}
			}
			f.mu.Lock()
			v, ok := read(r)
			idx := f.index
			f.mu.Unlock()
			if !ok {
				apiError(w, http.StatusNotFound, "not_found", "no such thing: "+r.URL.Path)
				return
			}
			w.Header().Set("X-Berth-Index", strconv.FormatUint(idx, 10))
			var b []byte
			var err error
			switch v := v.(type) {
			case proto.Message:
				b, err = apijson.Marshal(v)
			case []proto.Message:
				// Paged as the API pages: per_page items (100 when not
				// given), the next one's position as the token.
				from, _ := strconv.Atoi(r.URL.Query().Get("next_token"))
				n, _ := strconv.Atoi(r.URL.Query().Get("per_page"))
				if n == 0 {
					n = 100
				}
				v = v[min(from, len(v)):]
				if len(v) > n {
					v = v[:n]
					w.Header().Set("X-Berth-NextToken", fmt.Sprintf("%09d", from+n))
				}
				b, err = apijson.MarshalList(v)
			}
			if err != nil {
				apiError(w, http.StatusInternalServerError, "internal", err.Error())
				return
			}
			_, _ = w.Write(b)
		})
	}
	one := func(ms ...proto.Message) (any, bool) {
		if len(ms) == 0 || ms[0] == nil || !ms[0].ProtoReflect().IsValid() {
			return nil, false
		}
		return ms[0], true
	}
	list := func(ms []proto.Message) (any, bool) { return ms, true }
	route("/v1/operator/raft/configuration", func(*http.Request) (any, bool) {
		return &pb.RaftConfigurationResponse{Servers: f.servers}, true
	})
	route("/v1/nodes", func(*http.Request) (any, bool) { return list(msgs(f.nodes)) })
	route("/v1/node/{id}", func(r *http.Request) (any, bool) {
		return one(find(f.nodes, r.PathValue("id"), (*pb.Node).GetId))
	})
	route("/v1/node/{id}/allocations", func(r *http.Request) (any, bool) {
		var out []*pb.Allocation
		for _, a := range f.allocs {
			if a.GetNodeId() == r.PathValue("id") {
				out = append(out, a)
			}
		}
		return list(msgs(out))
	})
	route("/v1/jobs", func(*http.Request) (any, bool) {
		var out []*pb.JobListStub
		for _, j := range f.jobs {
			out = append(out, &pb.JobListStub{Id: j.GetId(), Name: j.GetName(), Type: j.GetType(), Status: j.GetStatus(), Stop: j.GetStop(), Version: j.GetVersion()})
		}
		return list(msgs(out))
	})
	job := func(r *http.Request) *pb.Job { return find(f.jobs, r.PathValue("id"), (*pb.Job).GetId) }
	route("/v1/job/{id}", func(r *http.Request) (any, bool) { return one(job(r)) })
	route("/v1/job/{id}/versions", func(r *http.Request) (any, bool) {
		if j := job(r); j != nil {
			return list([]proto.Message{j})
		}
		return nil, false
	})
	route("/v1/job/{id}/summary", func(r *http.Request) (any, bool) {
		if job(r) == nil {
			return nil, false
		}
		return &pb.JobSummary{Groups: map[string]*pb.GroupSummary{"app": {Running: 1}}}, true
	})
	route("/v1/job/{id}/allocations", func(r *http.Request) (any, bool) {
		var out []*pb.Allocation
		for _, a := range f.allocs {
			if a.GetJobId() == r.PathValue("id") {
				out = append(out, a)
			}
		}
		return list(msgs(out))
	})
	route("/v1/job/{id}/evaluations", func(r *http.Request) (any, bool) { return list(msgs(f.evals)) })
	route("/v1/allocation/{id}", func(r *http.Request) (any, bool) {
		return one(find(f.allocs, r.PathValue("id"), (*pb.Allocation).GetId))
	})
	route("/v1/plugins", func(*http.Request) (any, bool) { return list(msgs(f.plugins)) })
	route("/v1/plugin/csi/{id}", func(r *http.Request) (any, bool) {
		return one(find(f.plugins, r.PathValue("id"), (*pb.CSIPlugin).GetId))
	})
	route("/v1/volumes", func(*http.Request) (any, bool) { return list(msgs(f.volumes)) })
	route("/v1/volume/csi/{id}", func(r *http.Request) (any, bool) {
		return one(find(f.volumes, r.PathValue("id"), func(v *pb.VolumeView) string { return v.GetVolume().GetId() }))
	})
	route("/v1/volumes/claims", func(r *http.Request) (any, bool) {
		q := r.URL.Query()
		var out []*pb.Claim
		for _, v := range f.volumes {
			for _, c := range v.GetClaims() {
				if (q.Get("state") == "" || pb.EnumWord(c.GetState()) == q.Get("state")) && (q.Get("node_id") == "" || c.GetNodeId() == q.Get("node_id")) {
					out = append(out, c)
				}
			}
		}
		return list(msgs(out))
	})
	return mux
}

// wait blocks until the index passes min or ctx ends.
func (f *fakeAPI) wait(ctx context.Context, min uint64) bool {
	for {
		f.mu.Lock()
		idx, ch := f.index, f.changed
		f.mu.Unlock()
		if idx > min {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

func (f *fakeAPI) callsOf(pattern string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[pattern]
}

func apiError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"code": code, "message": msg})
}

func msgs[M proto.Message](ms []M) []proto.Message {
	out := make([]proto.Message, len(ms))
	for i, m := range ms {
		out[i] = m
	}
	return out
}

func find[M any](ms []M, id string, key func(M) string) M {
	var zero M
	for _, m := range ms {
		if key(m) == id {
			return m
		}
	}
	return zero
}
