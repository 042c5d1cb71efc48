package ui

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/rpc/pb"
)

const (
	nodeID   = "8c1d7a1e-0000-4000-8000-000000000001"
	allocID  = "a11c0000-0000-4000-8000-000000000002"
	claimID  = "c1a10000-0000-4000-8000-000000000003"
	opClaim  = "c1a10000-0000-4000-8000-000000000004"
	evilName = `<script>alert("x")</script>`
)

var secret1 = strings.Repeat("a1", 32)

// fixtures is a small cluster: one node, one job whose alloc holds a
// claim on vol1 that failed its last try, an operator claim, a plugin.
func fixtures() *fakeAPI {
	f := newFakeAPI()
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC).UnixNano()
	f.servers = []*pb.RaftServer{{Id: "s1", Name: "server-1", RaftAddr: "127.0.0.1:4647", Leader: true, Voter: true}}
	f.nodes = []*pb.Node{{
		Id: nodeID, Name: "node-1", Status: pb.NodeStatus_NODE_STATUS_READY, Eligibility: pb.NodeEligibility_NODE_ELIGIBILITY_ELIGIBLE,
		Drivers:        map[string]*pb.DriverInfo{"raw_exec": {Detected: true, Healthy: true, HealthDescription: "ok"}},
		CsiNodePlugins: map[string]*pb.CSIPluginInfo{"hostpath": {Healthy: true, Provider: "hostpath.csi.berth.dev"}},
	}}
	f.jobs = []*pb.Job{{
		Id: "web", Name: evilName, Type: pb.JobType_JOB_TYPE_SERVICE, Status: pb.JobStatus_JOB_STATUS_RUNNING, Priority: 50,
		Groups: []*pb.TaskGroup{{Name: "app", Count: 1, Tasks: []*pb.Task{{Name: "user", Driver: "raw_exec"}},
			Volumes: map[string]*pb.VolumeRequest{"data": {Name: "data", Type: "csi", Source: "vol1"}}}},
	}}
	f.allocs = []*pb.Allocation{{
		Id: allocID, JobId: "web", TaskGroup: "app", NodeId: nodeID, NodeName: "node-1",
		DesiredStatus: pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_RUN, ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING,
		TaskStates: map[string]*pb.TaskState{"user": {State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING, StartedAt: now,
			Events: []*pb.TaskEvent{{Type: "Started", OccurredAt: now, Message: "<b>started</b>"}}}},
	}}
	f.evals = []*pb.Evaluation{{Id: "e1", JobId: "web", Status: pb.EvalStatus_EVAL_STATUS_COMPLETE, TriggeredBy: pb.EvalTrigger_EVAL_TRIGGER_JOB_REGISTER}}
	f.plugins = []*pb.CSIPlugin{{Id: "hostpath", Provider: "hostpath.csi.berth.dev", Version: "1.0", ControllerRequired: true,
		ControllersHealthy: 1, ControllersExpected: 1, NodesHealthy: 1, NodesExpected: 2, Schedulable: true,
		Nodes: map[string]*pb.CSIPluginInfo{nodeID: {Healthy: true, HealthDescription: "serving"}}}}
	f.volumes = []*pb.VolumeView{{
		Volume: &pb.Volume{Id: "vol1", PluginId: "hostpath", CapacityBytes: 1 << 20, Schedulable: true,
			Secrets:            map[string]string{"api_key": "hunter2"},
			Capabilities:       []*pb.VolumeCapability{{AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}},
			AccessibleTopology: []*pb.Topology{{Segments: map[string]string{"zone": "z1"}}}},
		Claims: []*pb.Claim{
			{Id: claimID, VolumeId: "vol1", AllocId: allocID, NodeId: nodeID, State: pb.ClaimState_CLAIM_STATE_RELEASING, Attempts: 3,
				NextRetryAt: now + int64(time.Minute), CreateIndex: 5,
				LastError: &pb.VolumeError{Message: "NodeUnpublishVolume: <device busy>", Class: pb.VolumeErrorClass_VOLUME_ERROR_CLASS_UNCERTAIN, FailedAt: now}},
			{Id: opClaim, VolumeId: "vol1", Operator: true, NodeId: nodeID, State: pb.ClaimState_CLAIM_STATE_IN_USE, CreateIndex: 6},
		},
		Attachments: []*pb.Attachment{{VolumeId: "vol1", NodeId: nodeID, State: pb.AttachmentState_ATTACHMENT_STATE_ATTACHED}},
	}}
	return f
}

func newTestHandler(t *testing.T, f *fakeAPI) (*Handler, http.Handler) {
	t.Helper()
	h, err := New(f.handler(), nil)
	if err != nil {
		t.Fatal(err)
	}
	h.now = func() time.Time { return time.Date(2026, 11, 28, 12, 0, 30, 0, time.UTC) }
	mux := http.NewServeMux()
	for _, r := range h.Routes() {
		mux.HandleFunc("GET "+r.Pattern, r.Serve)
	}
	return h, mux
}

type answer struct {
	status int
	header http.Header
	body   string
}

func get(t *testing.T, h http.Handler, path string, hdr ...string) answer {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	b, _ := io.ReadAll(rec.Result().Body)
	return answer{rec.Code, rec.Header(), string(b)}
}

func wantIn(t *testing.T, what, body string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(body, w) {
			t.Errorf("%s: no %q in\n%s", what, w, body)
		}
	}
}

func wantNotIn(t *testing.T, what, body string, nots ...string) {
	t.Helper()
	for _, n := range nots {
		if strings.Contains(body, n) {
			t.Errorf("%s: %q in\n%s", what, n, body)
		}
	}
}

func wantSecurityHeaders(t *testing.T, what string, a answer) {
	t.Helper()
	if got := a.header.Get("Content-Security-Policy"); got != ContentSecurityPolicy {
		t.Errorf("%s: Content-Security-Policy %q, want %q", what, got, ContentSecurityPolicy)
	}
	for _, d := range []string{"default-src 'self'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'", "object-src 'none'", "base-uri 'none'"} {
		if !strings.Contains(a.header.Get("Content-Security-Policy"), d) {
			t.Errorf("%s: CSP lacks %s", what, d)
		}
	}
	if a.header.Get("X-Frame-Options") != "DENY" || a.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("%s: X-Frame-Options %q, X-Content-Type-Options %q", what, a.header.Get("X-Frame-Options"), a.header.Get("X-Content-Type-Options"))
	}
}

// TestEveryPageRenders opens every page over the fixtures and checks what
// each must show, its security headers, that it links nothing inline (no
// inline script or style: the CSP would refuse them), and that no value
// escaped html/template.
func TestEveryPageRenders(t *testing.T) {
	_, h := newTestHandler(t, fixtures())
	pages := []struct {
		path  string
		wants []string
	}{
		{"/ui/", []string{"server-1", "leader", `id="nodes-total">1 `, "hostpath", "1 / 1", "1 / 2", "releasing", "NodeUnpublishVolume: &lt;device busy&gt;", `href="/ui/volumes/vol1"`, "3</td>"}},
		{"/ui/jobs", []string{`href="/ui/jobs/web"`, "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;", "running"}},
		{"/ui/jobs/web", []string{"Job <span class=\"id\">web</span>", "&lt;script&gt;", `data-action="stop-job"`, `href="/ui/allocs/` + allocID, `href="/ui/volumes/vol1"`, "job-register", "complete"}},
		{"/ui/allocs/" + allocID, []string{"Task user", "&lt;b&gt;started&lt;/b&gt;", "2026-11-28 12:00:00 UTC", `data-log-alloc="` + allocID + `"`, `data-log-task="user"`}},
		{"/ui/nodes", []string{`href="/ui/nodes/` + nodeID + `"`, "node-1", "1 / 1", `href="/ui/plugins/hostpath"`}},
		{"/ui/nodes/" + nodeID, []string{`id="node-id">` + nodeID, "raw_exec", "healthy", "eligible", `data-action="drain-on"`, claimID[:8], allocID[:8]}},
		{"/ui/plugins", []string{"hostpath.csi.berth.dev 1.0", "1 / 1", "1 / 2"}},
		{"/ui/plugins/hostpath", []string{"1 healthy of 1 expected", "1 healthy of 2 expected", "serving", nodeID[:8]}},
		{"/ui/volumes", []string{`href="/ui/volumes/vol1"`, "1.0 MiB", "in-use 1, releasing 1"}},
		{"/ui/volumes/vol1", []string{
			`id="claim-` + claimID + `"`, `data-state="releasing"`, "NodeUnpublishVolume: &lt;device busy&gt;", "uncertain", "in 30s",
			`href="/ui/allocs/` + allocID + `"`, `href="/ui/nodes/` + nodeID + `"`,
			`data-action="release-claim" data-volume="vol1" data-claim="` + opClaim + `"`,
			"single-node-writer, file-system", "zone=z1", "attached",
		}},
	}
	for _, p := range pages {
		a := get(t, h, p.path)
		if a.status != http.StatusOK {
			t.Errorf("%s: HTTP %d\n%s", p.path, a.status, a.body)
			continue
		}
		wantSecurityHeaders(t, p.path, a)
		if ct := a.header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
			t.Errorf("%s: Content-Type %q", p.path, ct)
		}
		wantIn(t, p.path, a.body, p.wants...)
		wantIn(t, p.path, a.body, `<script src="/ui/static/ui.js" defer></script>`, `<main id="main"`, `<nav aria-label="Sections">`, `<label for="token-input">`)
		wantNotIn(t, p.path, a.body, "<script>", "style=", "onerror", "onclick", "hunter2", "api_key")
		if n := strings.Count(a.body, "<th ") + strings.Count(a.body, "<th>") - strings.Count(a.body, `<th scope="col">`); n != 0 {
			t.Errorf("%s: %d table headers without a scope", p.path, n)
		}
		// The fragment is the live part alone, with the index to wait from.
		fa := get(t, h, p.path+"?fragment=main")
		if fa.status != http.StatusOK || strings.Contains(fa.body, "<html") || fa.header.Get("X-Berth-Index") == "" {
			t.Errorf("%s fragment: HTTP %d, index %q, whole page %v", p.path, fa.status, fa.header.Get("X-Berth-Index"), strings.Contains(fa.body, "<html"))
		}
		wantSecurityHeaders(t, p.path+" fragment", fa)
	}
}

func TestUnknownIDsAre404(t *testing.T) {
	_, h := newTestHandler(t, fixtures())
	for _, p := range []string{"/ui/jobs/nope", "/ui/allocs/nope", "/ui/nodes/nope", "/ui/plugins/nope", "/ui/volumes/nope", "/ui/nothing-here", "/ui/static/nope.js"} {
		for _, path := range []string{p, p + "?fragment=main"} {
			a := get(t, h, path)
			if a.status != http.StatusNotFound {
				t.Errorf("%s: HTTP %d, want 404", path, a.status)
			}
			wantSecurityHeaders(t, path, a)
			wantIn(t, path, a.body, "Not found", "not_found")
		}
	}
}

// TestForbiddenNamesTheCapability: a read the token may not make shows the
// API's 403, which names the capability, with the page's status; on the
// overview only the part it keeps is replaced.
func TestForbiddenNamesTheCapability(t *testing.T) {
	f := fixtures()
	f.deny["/v1/volume/csi/{id}"] = "csi-read-volume"
	f.deny["/v1/jobs"] = "list-jobs"
	_, h := newTestHandler(t, f)
	a := get(t, h, "/ui/volumes/vol1")
	if a.status != http.StatusForbidden {
		t.Fatalf("HTTP %d, want 403", a.status)
	}
	wantIn(t, "volume page", a.body, "Permission denied", "csi-read-volume", "permission_denied", `href="#token-input"`)
	wantSecurityHeaders(t, "403", a)
	a = get(t, h, "/ui/")
	if a.status != http.StatusOK {
		t.Fatalf("overview: HTTP %d", a.status)
	}
	wantIn(t, "overview", a.body, "list-jobs", `id="nodes-total">1 `)
}

// TestTheTokenIsSentOn: a page request's token reaches the API reads.
func TestTheTokenIsSentOn(t *testing.T) {
	var got []string
	f := fixtures()
	api := f.handler()
	h, err := New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("X-Berth-Token"))
		api.ServeHTTP(w, r)
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for _, r := range h.Routes() {
		mux.HandleFunc("GET "+r.Pattern, r.Serve)
	}
	a := get(t, mux, "/ui/volumes/vol1?fragment=main", "X-Berth-Token", secret1)
	if a.status != http.StatusOK || len(got) == 0 {
		t.Fatalf("HTTP %d, %d API reads", a.status, len(got))
	}
	for _, tok := range got {
		if tok != secret1 {
			t.Fatalf("an API read carried token %q, want %q", tok, secret1)
		}
	}
	if a := get(t, mux, "/ui/", "X-Berth-Token", secret1, "Authorization", "Bearer "+strings.Repeat("b", 64)); a.status != http.StatusBadRequest {
		t.Errorf("two different tokens: HTTP %d, want 400", a.status)
	}
}

func TestRootRedirectsAndStaticFiles(t *testing.T) {
	_, h := newTestHandler(t, fixtures())
	a := get(t, h, "/")
	if a.status != http.StatusTemporaryRedirect || a.header.Get("Location") != "/ui/" {
		t.Errorf("/: HTTP %d to %q", a.status, a.header.Get("Location"))
	}
	for path, ct := range map[string]string{"/ui/static/ui.js": "text/javascript; charset=utf-8", "/ui/static/ui.css": "text/css; charset=utf-8", "/ui/static/favicon.svg": "image/svg+xml"} {
		a := get(t, h, path)
		if a.status != http.StatusOK || a.header.Get("Content-Type") != ct || len(a.body) == 0 {
			t.Errorf("%s: HTTP %d, %q, %d bytes", path, a.status, a.header.Get("Content-Type"), len(a.body))
		}
		wantSecurityHeaders(t, path, a)
	}
}
