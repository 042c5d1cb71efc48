package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
)

const (
	claimNode = "7e1a2b3c-4d5e-4f60-8a9b-0c1d2e3f4a5b"
	claimID   = "c0ffee00-1111-4222-8333-444455556666"
)

// fakeClaimAPI is the agent's claim endpoints for the claim commands: the
// create answers a reserved claim at index 10, and each blocking read of
// the claim answers the next of states (index 11, 12, ...), refusing a
// read that does not block on the index it was last given.
type fakeClaimAPI struct {
	t      *testing.T
	url    string
	mu     sync.Mutex
	index  uint64
	states []*pb.ClaimGetResponse
	// selfNode is the node the agent asked is the client of ("": a server
	// only); reqs every request as "METHOD /path?query".
	selfNode string
	// readyAtOnce: the create answers the claim ready (no controller
	// publish needed).
	readyAtOnce bool
	// stuck, once states are used up, is what a blocking read answers when
	// nothing changes: after the read's wait (at the same index), or, with
	// ignoreWait, only when the client gives up (the connection cut).
	stuck      *pb.ClaimGetResponse
	ignoreWait bool
	waits      []string // each blocking read's wait parameter
	reqs       []string
	bodies     []string
	// others are claims listed beside the one the create makes (of other
	// volumes, in the claim list only).
	others []*pb.Claim
}

func newFakeClaimAPI(t *testing.T, states ...*pb.ClaimGetResponse) *fakeClaimAPI {
	f := &fakeClaimAPI{t: t, states: states}
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, index uint64, m proto.Message) {
		b, err := apijson.Marshal(m)
		if err != nil {
			t.Error(err)
		}
		w.Header().Set("X-Berth-Index", strconv.FormatUint(index, 10))
		_, _ = w.Write(b)
	}
	fail := func(w http.ResponseWriter, status int, code, msg string) {
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"code": %q, "message": %q}`, code, msg)
	}
	handle := func(pattern string, h http.HandlerFunc) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			f.mu.Lock()
			defer f.mu.Unlock()
			f.reqs = append(f.reqs, r.Method+" "+r.URL.RequestURI())
			f.bodies = append(f.bodies, string(b))
			h(w, r)
		})
	}
	reserved := &pb.Claim{Id: claimID, VolumeId: "data", Operator: true, NodeId: claimNode, Mode: pb.ClaimMode_CLAIM_MODE_WRITE,
		AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER, State: pb.ClaimState_CLAIM_STATE_RESERVED}
	path := "csi/publish/" + claimID + "/data"
	handle("POST /v1/volume/csi/{id}/claims", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != "data" {
			fail(w, 404, "not_found", fmt.Sprintf("volume %q: volume not found", r.PathValue("id")))
			return
		}
		f.index = 10
		c := proto.CloneOf(reserved)
		if f.readyAtOnce {
			c.State = pb.ClaimState_CLAIM_STATE_READY
		}
		reply(w, 10, &pb.ClaimCreateResponse{Claim: c, PublishPath: path, Meta: &pb.WriteMeta{Index: 10},
			Attachment: &pb.Attachment{VolumeId: "data", NodeId: claimNode, State: pb.AttachmentState_ATTACHMENT_STATE_ATTACHING}})
	})
	handle("GET /v1/volume/csi/{id}/claims/{claim}", func(w http.ResponseWriter, r *http.Request) {
		if got := r.URL.Query().Get("index"); got != strconv.FormatUint(f.index, 10) {
			t.Errorf("claim read with index %q, want a blocking read at %d", got, f.index)
		}
		f.waits = append(f.waits, r.URL.Query().Get("wait"))
		if len(f.states) == 0 && f.stuck != nil {
			var after <-chan time.Time
			if d, err := time.ParseDuration(r.URL.Query().Get("wait")); err == nil && !f.ignoreWait {
				after = time.After(d)
			}
			f.mu.Unlock()
			select {
			case <-after:
			case <-r.Context().Done():
			}
			f.mu.Lock()
			stuck := proto.CloneOf(f.stuck)
			stuck.PublishPath = path
			reply(w, f.index, stuck)
			return
		}
		if len(f.states) == 0 {
			fail(w, 404, "not_found", "claim freed")
			return
		}
		next := f.states[0]
		f.states = f.states[1:]
		f.index++
		next.PublishPath = path
		reply(w, f.index, next)
	})
	handle("GET /v1/volume/claim/{claim}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("claim") != claimID {
			fail(w, 404, "not_found", "claim not found")
			return
		}
		reply(w, 20, &pb.ClaimGetResponse{Claim: reserved, PublishPath: path})
	})
	handle("GET /v1/volumes/claims", func(w http.ResponseWriter, r *http.Request) {
		all := append([]*pb.Claim{reserved}, f.others...)
		slices.SortFunc(all, func(a, b *pb.Claim) int { return strings.Compare(a.GetId(), b.GetId()) })
		var page []*pb.Claim
		for _, c := range all {
			if r.URL.Query().Get("operator") == "true" && !c.GetOperator() {
				continue
			}
			if c.GetId() >= r.URL.Query().Get("next_token") {
				page = append(page, c)
			}
		}
		b, _ := apijson.MarshalList(page)
		w.Header().Set("X-Berth-Index", "20")
		_, _ = w.Write(b)
	})
	handle("DELETE /v1/volume/csi/{id}/claims/{claim}", func(w http.ResponseWriter, r *http.Request) {
		c := proto.CloneOf(reserved)
		c.State = pb.ClaimState_CLAIM_STATE_RELEASING
		reply(w, 21, &pb.ClaimReleaseResponse{Claim: c})
	})
	handle("GET /v1/agent/self", func(w http.ResponseWriter, r *http.Request) {
		self := &pb.AgentSelf{Name: "a1", DataDir: "/var/lib/berth"}
		if f.selfNode != "" {
			self.Client = &pb.AgentClientInfo{NodeId: f.selfNode}
		}
		reply(w, 1, self)
	})
	handle("GET /v1/node/{id}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, 1, &pb.Node{Id: claimNode, Name: "client-2"})
	})
	handle("GET /v1/nodes", func(w http.ResponseWriter, r *http.Request) {
		b, _ := apijson.MarshalList([]*pb.Node{{Id: claimNode, Name: "client-2"}})
		_, _ = w.Write(b)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

func (f *fakeClaimAPI) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.reqs...)
}

func claimState(s pb.ClaimState, a *pb.Attachment) *pb.ClaimGetResponse {
	return &pb.ClaimGetResponse{Claim: &pb.Claim{Id: claimID, VolumeId: "data", Operator: true, NodeId: claimNode,
		Mode: pb.ClaimMode_CLAIM_MODE_WRITE, State: s}, Attachment: a}
}

func attaching(attempts int32, class pb.VolumeErrorClass, msg string) *pb.Attachment {
	return &pb.Attachment{VolumeId: "data", NodeId: claimNode, State: pb.AttachmentState_ATTACHMENT_STATE_ATTACHING, Attempts: attempts,
		LastError: &pb.VolumeError{Message: msg, Class: class}}
}

// `volume claim` creates the claim, follows it with blocking reads through
// a failed try of its controller publish until it is ready, and through a
// failed try of the node's publish until the node's client published it,
// and prints the host path: absolute when the agent asked is the node's
// client.
func TestVolumeClaimWaitsUntilPublished(t *testing.T) {
	nodeTry := claimState(pb.ClaimState_CLAIM_STATE_READY, &pb.Attachment{State: pb.AttachmentState_ATTACHMENT_STATE_ATTACHED})
	nodeTry.Claim.Attempts = 1
	nodeTry.Claim.LastError = &pb.VolumeError{Message: "node plugin not healthy yet", Class: pb.VolumeErrorClass_VOLUME_ERROR_CLASS_UNCERTAIN}
	f := newFakeClaimAPI(t,
		claimState(pb.ClaimState_CLAIM_STATE_RESERVED, attaching(1, pb.VolumeErrorClass_VOLUME_ERROR_CLASS_UNCERTAIN, "controller timed out")),
		nodeTry,
		claimState(pb.ClaimState_CLAIM_STATE_IN_USE, &pb.Attachment{State: pb.AttachmentState_ATTACHMENT_STATE_ATTACHED}))
	f.selfNode = claimNode
	out := wantOut(t, []string{"volume", "claim", "-address", f.url, "-node", "7e1a", "-mode", "write", "data"}, 0,
		"==> Claim "+claimID+` of volume "data" (write, single-node-writer) reserved on node 7e1a2b3c`,
		"    Controller publish to node 7e1a2b3c failed (attempt 1, uncertain): controller timed out\n",
		"    Publish on node 7e1a2b3c failed (attempt 1, uncertain): node plugin not healthy yet\n",
		`==> Volume "data" is claimed and published on node 7e1a2b3c (client-2)`,
		"    Host path: /var/lib/berth/csi/publish/"+claimID+"/data/\n",
		"berth volume release "+claimID)
	if strings.Count(out, "Controller publish") != 1 || strings.Count(out, "Publish on node") != 1 {
		t.Errorf("each failed try is shown once:\n%s", out)
	}
	reqs := f.requests()
	var body string
	for i, r := range reqs {
		if strings.HasPrefix(r, "POST ") {
			body = f.bodies[i]
		}
	}
	var sent struct {
		NodeID string `json:"node_id"`
		Mode   string `json:"mode"`
	}
	if err := json.Unmarshal([]byte(body), &sent); err != nil || sent.NodeID != claimNode || sent.Mode != "write" {
		t.Errorf("create body %s: %v", body, err)
	}
	if n := blockingReads(reqs); n != 3 {
		t.Errorf("%d blocking reads, want 3: %q", n, reqs)
	}
}

// Another node's claim: the host path is given relative to that node's
// data dir. -json prints the published claim as the API's JSON.
func TestVolumeClaimJSONAndRelativePath(t *testing.T) {
	f := newFakeClaimAPI(t, claimState(pb.ClaimState_CLAIM_STATE_IN_USE, nil))
	wantOut(t, []string{"volume", "claim", "-address", f.url, "data"}, 0,
		"Host path: <data_dir of the client on node 7e1a2b3c>/csi/publish/"+claimID+"/data/\n")

	// Ready at once: one read, woken when the node published it.
	f = newFakeClaimAPI(t, claimState(pb.ClaimState_CLAIM_STATE_IN_USE, nil))
	f.readyAtOnce = true
	wantOut(t, []string{"volume", "claim", "-address", f.url, "data"}, 0, `"data" is claimed and published`)
	if n := blockingReads(f.requests()); n != 1 {
		t.Errorf("%d claim reads for a claim ready at once, want 1", n)
	}

	f = newFakeClaimAPI(t, claimState(pb.ClaimState_CLAIM_STATE_IN_USE, nil))
	out := wantOut(t, []string{"volume", "claim", "-address", f.url, "-json", "-mode", "read", "data"}, 0)
	var got struct {
		Claim struct {
			ID    string `json:"id"`
			State string `json:"state"`
		} `json:"claim"`
		PublishPath string `json:"publish_path"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Claim.ID != claimID || got.Claim.State != "in-use" ||
		got.PublishPath != "csi/publish/"+claimID+"/data" {
		t.Fatalf("-json: %v\n%s", err, out)
	}
	if strings.Contains(out, "==>") {
		t.Errorf("-json prints only JSON:\n%s", out)
	}
}

// A final controller error ends the wait, saying the claim stays and how
// to release it; a claim freed while waited on, or released, is an error;
// bad arguments are usage errors.
func TestVolumeClaimFailures(t *testing.T) {
	f := newFakeClaimAPI(t, claimState(pb.ClaimState_CLAIM_STATE_RESERVED,
		attaching(3, pb.VolumeErrorClass_VOLUME_ERROR_CLASS_FINAL, "volume ext-data is attached to another instance")))
	wantOutErr(t, []string{"volume", "claim", "-address", f.url, "data"}, 1,
		`volume "data": controller publish to node `+claimNode+" failed (attempt 3): volume ext-data is attached to another instance",
		"claim "+claimID+" stays reserved: release it with `berth volume release "+claimID+"`")

	nodeFail := claimState(pb.ClaimState_CLAIM_STATE_READY, nil)
	nodeFail.Claim.Attempts = 2
	nodeFail.Claim.LastError = &pb.VolumeError{Message: "csi NodeStageVolume: InvalidArgument: bad fs", Class: pb.VolumeErrorClass_VOLUME_ERROR_CLASS_FINAL}
	f = newFakeClaimAPI(t, nodeFail)
	wantOutErr(t, []string{"volume", "claim", "-address", f.url, "data"}, 1,
		`volume "data": publish on node `+claimNode+" failed (attempt 2): csi NodeStageVolume: InvalidArgument: bad fs",
		"claim "+claimID+" stays ready: release it with `berth volume release "+claimID+"`")

	f = newFakeClaimAPI(t)
	wantOutErr(t, []string{"volume", "claim", "-address", f.url, "data"}, 1, "was freed before it was published")
	f = newFakeClaimAPI(t, claimState(pb.ClaimState_CLAIM_STATE_RELEASING, nil))
	wantOutErr(t, []string{"volume", "claim", "-address", f.url, "data"}, 1, "is releasing: it was released before the command saw it published")
	wantOutErr(t, []string{"volume", "claim", "-address", f.url, "nope"}, 1, `volume "nope": volume not found`)
	wantOutErr(t, []string{"volume", "claim", "-address", f.url, "-mode", "exclusive", "data"}, exitUsage, `-mode="exclusive": want read or write`)
	wantOutErr(t, []string{"volume", "claim", "-address", f.url}, exitUsage, "exactly one volume ID", "Usage: berth volume claim VOLUME")
	wantOutErr(t, []string{"volume", "claim", "-address", f.url, "-node", "ffff", "data"}, 1, `no node with ID or prefix "ffff"`)
}

// `volume release` finds the claim's volume by the claim ID and releases
// it, saying it is freed once its node has unpublished it.
func TestVolumeRelease(t *testing.T) {
	f := newFakeClaimAPI(t)
	wantOut(t, []string{"volume", "release", "-address", f.url, claimID}, 0,
		"==> Claim "+claimID+` of volume "data" on node 7e1a2b3c is releasing: it is freed once the node's client has unpublished`)
	if reqs := f.requests(); len(reqs) != 3 || reqs[0] != "GET /v1/volumes/claims?next_token="+claimID+"&operator=true&per_page=100" ||
		reqs[2] != "DELETE /v1/volume/csi/data/claims/"+claimID {
		t.Errorf("requests %q", reqs)
	}
	wantOutErr(t, []string{"volume", "release", "-address", f.url, "deadbeef"}, 1, `no claim with ID or prefix "deadbeef" (never reserved, or freed already`)
	wantOutErr(t, []string{"volume", "release", "-address", f.url}, exitUsage, "exactly one claim ID")
}

// `volume release` takes a unique prefix of a claim's ID, as the other
// commands take one of an alloc's or a node's, and refuses a prefix two
// claims share, naming both. Before, only the full ID was found.
func TestVolumeReleaseByPrefix(t *testing.T) {
	f := newFakeClaimAPI(t)
	other := claimID[:4] + "0000-0000-4000-8000-000000000000"
	// An allocation's claim sharing the prefix is not one to release: it
	// does not make the prefix ambiguous.
	allocs := claimID[:8] + "-0000-4000-8000-000000000000"
	f.others = []*pb.Claim{{Id: other, VolumeId: "logs", Operator: true, NodeId: claimNode, State: pb.ClaimState_CLAIM_STATE_READY},
		{Id: allocs, VolumeId: "logs", AllocId: "a1", NodeId: claimNode, State: pb.ClaimState_CLAIM_STATE_IN_USE}}
	wantOut(t, []string{"volume", "release", "-address", f.url, claimID[:8]}, 0,
		"==> Claim "+claimID+` of volume "data" on node 7e1a2b3c is releasing`)
	if reqs := f.requests(); reqs[len(reqs)-1] != "DELETE /v1/volume/csi/data/claims/"+claimID {
		t.Errorf("requests %q", reqs)
	}
	n := len(f.requests())
	wantOutErr(t, []string{"volume", "release", "-address", f.url, claimID[:4]}, 1,
		fmt.Sprintf("prefix %q matches 2 claims: %s, %s", claimID[:4], other, claimID))
	for _, r := range f.requests()[n:] {
		if strings.HasPrefix(r, "DELETE ") {
			t.Fatalf("an ambiguous prefix released a claim: %s", r)
		}
	}
}

// With -timeout the wait ends after it, the claim kept: the error names the
// claim's state, what it waits for (its attachment's failed tries), how to
// follow it and how to release it. The agent is asked to answer by the
// deadline (wait); one that does not is cut off at the deadline, with the
// same report. Nothing is released.
func TestVolumeClaimTimeout(t *testing.T) {
	for _, ignoreWait := range []bool{false, true} {
		f := newFakeClaimAPI(t, claimState(pb.ClaimState_CLAIM_STATE_RESERVED,
			attaching(2, pb.VolumeErrorClass_VOLUME_ERROR_CLASS_UNCERTAIN, "controller timed out")))
		f.stuck = claimState(pb.ClaimState_CLAIM_STATE_RESERVED,
			attaching(2, pb.VolumeErrorClass_VOLUME_ERROR_CLASS_UNCERTAIN, "controller timed out"))
		f.ignoreWait = ignoreWait
		wantOutErr(t, []string{"volume", "claim", "-address", f.url, "-timeout", "300ms", "data"}, 1,
			"claim "+claimID+` of volume "data" is still reserved after 300ms: its controller publish to node `+claimNode+
				" has not succeeded (2 failed tries, the last: controller timed out)",
			"the claim is kept: follow it with `berth volume status -verbose data`, or release it with `berth volume release "+claimID+"`")
		for _, r := range f.requests() {
			if strings.HasPrefix(r, "DELETE ") {
				t.Errorf("the claim was released on timeout: %q", r)
			}
		}
		f.mu.Lock()
		waits := f.waits
		f.mu.Unlock()
		if len(waits) < 2 {
			t.Fatalf("reads %q, want the first answered and a blocking one", waits)
		}
		for _, w := range waits {
			if d, err := time.ParseDuration(w); err != nil || d <= 0 || d > 300*time.Millisecond {
				t.Errorf("a read asked to wait %q, want at most the 300ms left", w)
			}
		}
	}

	// No try failed yet: said so. -timeout 0 is no limit; negative is a
	// usage error.
	f := newFakeClaimAPI(t)
	f.stuck = claimState(pb.ClaimState_CLAIM_STATE_RESERVED,
		&pb.Attachment{VolumeId: "data", NodeId: claimNode, State: pb.AttachmentState_ATTACHMENT_STATE_ATTACHING})
	wantOutErr(t, []string{"volume", "claim", "-address", f.url, "-timeout", "100ms", "data"}, 1,
		`is still reserved after 100ms: its controller publish to node `+claimNode+
			" has not succeeded (no try has failed: is a controller of the volume's plugin running?)")
	// Ready (published by the controller) but not published by the node's
	// client: the report says so (2s: one read must be answered first,
	// under -race on a loaded machine).
	f = newFakeClaimAPI(t)
	f.stuck = claimState(pb.ClaimState_CLAIM_STATE_READY,
		&pb.Attachment{VolumeId: "data", NodeId: claimNode, State: pb.AttachmentState_ATTACHMENT_STATE_ATTACHED})
	wantOutErr(t, []string{"volume", "claim", "-address", f.url, "-timeout", "2s", "data"}, 1,
		`is still ready after 2s: the client on node `+claimNode+
			" has not published it (no try has failed: is the node's client up and its node plugin healthy?)")
	f = newFakeClaimAPI(t, claimState(pb.ClaimState_CLAIM_STATE_IN_USE, nil))
	wantOut(t, []string{"volume", "claim", "-address", f.url, "-timeout", "0", "data"}, 0, `"data" is claimed and published`)
	f.mu.Lock()
	w := f.waits
	f.mu.Unlock()
	if len(w) != 1 || w[0] != "" {
		t.Errorf("-timeout 0 sent waits %q, want none", w)
	}
	wantOutErr(t, []string{"volume", "claim", "-address", f.url, "-timeout", "-1s", "data"}, exitUsage, "-timeout=-1s: want a duration of 0")
}
