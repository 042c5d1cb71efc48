package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// fakeVolumes serves the Volumes service from fakeState's lock and index:
// a table of volume views with the servers' filters, pages and blocking,
// and canned plugin answers for the calls that reach a plugin.
type fakeVolumes struct {
	pb.UnimplementedVolumesServer
	s    *fakeState
	vols map[string]*pb.VolumeView // under s.mu
}

var _ pb.VolumesServer = (*fakeVolumes)(nil)

func newFakeVolumes(s *fakeState) *fakeVolumes {
	return &fakeVolumes{s: s, vols: map[string]*pb.VolumeView{}}
}

func (f *fakeVolumes) put(v *pb.VolumeView) uint64 {
	return f.s.update(func() { f.vols[v.GetVolume().GetId()] = v })
}

// redacted is what the servers answer: the secrets' values hidden.
func redacted(v *pb.Volume) *pb.Volume {
	v = proto.CloneOf(v)
	for k := range v.GetSecrets() {
		v.Secrets[k] = "[REDACTED]"
	}
	return v
}

func (f *fakeVolumes) register(method string, v *pb.Volume, req proto.Message) (*pb.VolumeRegisterResponse, error) {
	if err := f.s.record(method, req); err != nil {
		return nil, err
	}
	idx := f.s.update(func() { f.vols[v.GetId()] = &pb.VolumeView{Volume: v} })
	return &pb.VolumeRegisterResponse{Volume: redacted(v), Warnings: []string{"checked by the fake"}, Meta: &pb.WriteMeta{Index: idx}}, nil
}

func (f *fakeVolumes) Register(_ context.Context, req *pb.VolumeRegisterRequest) (*pb.VolumeRegisterResponse, error) {
	return f.register("Volumes.Register", req.GetVolume(), req)
}

func (f *fakeVolumes) Create(_ context.Context, req *pb.VolumeCreateRequest) (*pb.VolumeRegisterResponse, error) {
	return f.register("Volumes.Create", req.GetVolume(), req)
}

func (f *fakeVolumes) Deregister(_ context.Context, req *pb.VolumeDeregisterRequest) (*pb.VolumeDeleteResponse, error) {
	if err := f.s.record("Volumes.Deregister", req); err != nil {
		return nil, err
	}
	var err error
	idx := f.s.update(func() {
		v := f.vols[req.GetVolumeId()]
		switch {
		case v == nil:
			err = status.Errorf(codes.NotFound, "volume %q: volume not found", req.GetVolumeId())
		case len(v.GetClaims()) > 0 && !req.GetForce():
			err = status.Errorf(codes.FailedPrecondition, "volume %q: volume in use: claimed by alloc %s", req.GetVolumeId(), v.GetClaims()[0].GetAllocId())
		default:
			delete(f.vols, req.GetVolumeId())
		}
	})
	if err != nil {
		return nil, err
	}
	return &pb.VolumeDeleteResponse{Meta: &pb.WriteMeta{Index: idx}}, nil
}

func (f *fakeVolumes) Delete(_ context.Context, req *pb.VolumeDeleteRequest) (*pb.VolumeDeleteResponse, error) {
	if err := f.s.record("Volumes.Delete", req); err != nil {
		return nil, err
	}
	idx := f.s.update(func() { delete(f.vols, req.GetVolumeId()) })
	return &pb.VolumeDeleteResponse{Meta: &pb.WriteMeta{Index: idx}}, nil
}

func (f *fakeVolumes) Get(ctx context.Context, req *pb.VolumeGetRequest) (*pb.VolumeGetResponse, error) {
	if err := f.s.record("Volumes.Get", req); err != nil {
		return nil, err
	}
	var v *pb.VolumeView
	idx := f.s.read(ctx, req.GetQuery(), func() { v = f.vols[req.GetVolumeId()] })
	if v == nil {
		return nil, status.Errorf(codes.NotFound, "volume %q: volume not found", req.GetVolumeId())
	}
	v = proto.CloneOf(v)
	v.Volume = redacted(v.GetVolume())
	return &pb.VolumeGetResponse{Volume: v, Meta: &pb.QueryMeta{Index: idx}}, nil
}

func (f *fakeVolumes) List(ctx context.Context, req *pb.VolumeListRequest) (*pb.VolumeListResponse, error) {
	if err := f.s.record("Volumes.List", req); err != nil {
		return nil, err
	}
	onNode := func(v *pb.VolumeView) bool {
		return req.GetNodeId() == "" ||
			slices.ContainsFunc(v.GetClaims(), func(c *pb.Claim) bool { return c.GetNodeId() == req.GetNodeId() }) ||
			slices.ContainsFunc(v.GetAttachments(), func(a *pb.Attachment) bool { return a.GetNodeId() == req.GetNodeId() })
	}
	var page []*pb.VolumeView
	var next string
	var err error
	idx := f.s.read(ctx, req.GetQuery(), func() {
		page, next, err = pageOf(mapValues(f.vols, func(v *pb.VolumeView) bool {
			return strings.HasPrefix(v.GetVolume().GetId(), req.GetPrefix()) &&
				(req.GetPluginId() == "" || v.GetVolume().GetPluginId() == req.GetPluginId()) && onNode(v)
		}), func(v *pb.VolumeView) string { return v.GetVolume().GetId() }, req.GetQuery())
	})
	return &pb.VolumeListResponse{Volumes: page, Meta: &pb.QueryMeta{Index: idx, NextToken: next}}, err
}

func (f *fakeVolumes) Claims(ctx context.Context, req *pb.VolumeClaimsRequest) (*pb.VolumeClaimsResponse, error) {
	if err := f.s.record("Volumes.Claims", req); err != nil {
		return nil, err
	}
	if req.GetVolumeId() == "" {
		// Every volume's claims from next_token on, in claim ID order.
		var all []*pb.Claim
		idx := f.s.read(ctx, req.GetQuery(), func() {
			for _, v := range f.vols {
				for _, c := range v.GetClaims() {
					if c.GetId() >= req.GetQuery().GetNextToken() {
						all = append(all, c)
					}
				}
			}
		})
		slices.SortFunc(all, func(a, b *pb.Claim) int { return strings.Compare(a.GetId(), b.GetId()) })
		return &pb.VolumeClaimsResponse{Claims: all, Meta: &pb.QueryMeta{Index: idx}}, nil
	}
	var v *pb.VolumeView
	idx := f.s.read(ctx, req.GetQuery(), func() { v = f.vols[req.GetVolumeId()] })
	if v == nil {
		return nil, status.Errorf(codes.NotFound, "volume %q: volume not found", req.GetVolumeId())
	}
	return &pb.VolumeClaimsResponse{Claims: v.GetClaims(), Meta: &pb.QueryMeta{Index: idx}}, nil
}

func (f *fakeVolumes) CreateSnapshot(_ context.Context, req *pb.SnapshotCreateRequest) (*pb.SnapshotCreateResponse, error) {
	if err := f.s.record("Volumes.CreateSnapshot", req); err != nil {
		return nil, err
	}
	return &pb.SnapshotCreateResponse{Snapshot: &pb.Snapshot{Id: "snap-" + req.GetName(), VolumeId: req.GetVolumeId(), PluginId: "ebs", SizeBytes: 1 << 30, ReadyToUse: true}}, nil
}

func (f *fakeVolumes) DeleteSnapshot(_ context.Context, req *pb.SnapshotDeleteRequest) (*pb.SnapshotDeleteResponse, error) {
	if err := f.s.record("Volumes.DeleteSnapshot", req); err != nil {
		return nil, err
	}
	return &pb.SnapshotDeleteResponse{}, nil
}

func (f *fakeVolumes) ListSnapshots(_ context.Context, req *pb.SnapshotListRequest) (*pb.SnapshotListResponse, error) {
	if err := f.s.record("Volumes.ListSnapshots", req); err != nil {
		return nil, err
	}
	snaps := []*pb.Snapshot{{Id: "snap-1", PluginId: req.GetPluginId(), VolumeId: "data"}, {Id: "snap-2", PluginId: req.GetPluginId()}}
	if req.GetQuery().GetNextToken() == "" {
		return &pb.SnapshotListResponse{Snapshots: snaps[:1], Meta: &pb.QueryMeta{NextToken: "plugin-token-2"}}, nil
	}
	return &pb.SnapshotListResponse{Snapshots: snaps[1:], Meta: &pb.QueryMeta{}}, nil
}

func (f *fakeVolumes) Expand(_ context.Context, req *pb.VolumeExpandRequest) (*pb.VolumeExpandResponse, error) {
	if err := f.s.record("Volumes.Expand", req); err != nil {
		return nil, err
	}
	idx := f.s.update(func() {})
	return &pb.VolumeExpandResponse{CapacityBytes: req.GetCapacityMinBytes(), NodeExpansionRequired: true, Meta: &pb.WriteMeta{Index: idx}}, nil
}

func testVolume(id, plugin string) *pb.Volume {
	return &pb.Volume{Id: id, Name: id, PluginId: plugin, ExternalId: "vol-" + id, Secrets: map[string]string{"token": "hunter2"},
		Capabilities: []*pb.VolumeCapability{{AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER,
			AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}}}
}

// claimedView is a volume with an alloc's claim and an operator's on node,
// the alloc's failing, and the attachment to node retrying.
func claimedView(id, plugin, node string) *pb.VolumeView {
	return &pb.VolumeView{Volume: testVolume(id, plugin),
		Claims: []*pb.Claim{
			{Id: "c1", VolumeId: id, AllocId: "a1", NodeId: node, Mode: pb.ClaimMode_CLAIM_MODE_WRITE, State: pb.ClaimState_CLAIM_STATE_RESERVED,
				LastError: &pb.VolumeError{Message: "publish timed out", Class: pb.VolumeErrorClass_VOLUME_ERROR_CLASS_UNCERTAIN, Code: pb.GrpcCode_GRPC_CODE_DEADLINE_EXCEEDED},
				Attempts:  3, NextRetryAt: 1_800_000_000_000_000_000},
			{Id: "c2", VolumeId: id, Operator: true, NodeId: node, Mode: pb.ClaimMode_CLAIM_MODE_READ, State: pb.ClaimState_CLAIM_STATE_READY},
		},
		Attachments: []*pb.Attachment{{VolumeId: id, NodeId: node, PluginId: plugin, State: pb.AttachmentState_ATTACHMENT_STATE_ATTACHING,
			Attempts: 3, LastError: &pb.VolumeError{Message: "publish timed out"}}},
	}
}

// TestVolumeListFiltersPagesAndBlocks: /v1/volumes passes plugin_id,
// node_id and prefix to the servers, pages with next_token, accepts only
// ?type=csi, and a blocking list returns once the table changes.
func TestVolumeListFiltersPagesAndBlocks(t *testing.T) {
	f := newFakeServers(t)
	for i := range 3 {
		f.volumes.put(claimedView(fmt.Sprintf("data-%d", i), "ebs", "n1"))
	}
	f.volumes.put(&pb.VolumeView{Volume: testVolume("logs", "nfs")})

	r := call(t, f.url, "GET", "/v1/volumes?type=csi&per_page=2&plugin_id=ebs&node_id=n1", "")
	page, err := apijson.UnmarshalList(r.body, func() *pb.VolumeView { return &pb.VolumeView{} })
	if r.status != http.StatusOK || err != nil || len(page) != 2 || page[0].GetVolume().GetId() != "data-0" || r.header.Get(HeaderNextToken) != "data-2" {
		t.Fatalf("first page: %d %s %v, next %q", r.status, r.body, err, r.header.Get(HeaderNextToken))
	}
	q := f.state.requests("Volumes.List")[0].(*pb.VolumeListRequest)
	if q.GetPluginId() != "ebs" || q.GetNodeId() != "n1" || q.GetQuery().GetPerPage() != 2 {
		t.Fatalf("list request = %v", q)
	}
	if r := call(t, f.url, "GET", "/v1/volumes?node_id=n9", ""); r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != "[]" {
		t.Fatalf("no volume on n9: %d %s, want []", r.status, r.body)
	}
	if r := call(t, f.url, "GET", "/v1/volumes?type=host", ""); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), `type=\"host\"`) {
		t.Fatalf("type=host: %d %s, want 400 naming the type", r.status, r.body)
	}

	c, err := api.NewClient(f.url)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var ids []string
	for p, err := range api.Pages(ctx, &api.QueryOptions{PerPage: 3}, c.Volumes().List) {
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range p.Items {
			ids = append(ids, v.GetVolume().GetId())
		}
	}
	if want := []string{"data-0", "data-1", "data-2", "logs"}; !slices.Equal(ids, want) {
		t.Fatalf("all pages: %v, want %v", ids, want)
	}

	_, meta, err := c.Volumes().List(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		vols []*pb.VolumeView
		meta *api.QueryMeta
		err  error
	}
	done := make(chan result, 1)
	go func() {
		vs, m, err := c.Volumes().List(ctx, &api.QueryOptions{WaitIndex: meta.LastIndex, WaitTime: 60e9, Params: map[string]string{"plugin_id": "nfs"}})
		done <- result{vs, m, err}
	}()
	<-f.state.waiting
	f.volumes.put(&pb.VolumeView{Volume: testVolume("late", "nfs")})
	res := <-done
	if res.err != nil || res.meta.LastIndex <= meta.LastIndex || len(res.vols) != 2 || res.vols[0].GetVolume().GetId() != "late" {
		t.Fatalf("blocking list returned %v at %d (blocked at %d), %v", res.vols, res.meta.LastIndex, meta.LastIndex, res.err)
	}
}

// TestVolumeGetShowsClaimsAndAttachments: a volume's JSON lists each claim
// with its claimant, node, mode, state, last error, attempts and next
// retry, and the attachments; secrets' values never appear; an unknown
// volume is 404; the claims have their own list.
func TestVolumeGetShowsClaimsAndAttachments(t *testing.T) {
	f := newFakeServers(t)
	f.volumes.put(claimedView("team/data", "ebs", "n1"))

	r := call(t, f.url, "GET", "/v1/volume/csi/team%2Fdata", "")
	got := &pb.VolumeView{}
	r.wantOK(t, got)
	for _, want := range []string{`"claims": [`, `"alloc_id": "a1"`, `"operator": true`, `"node_id": "n1"`, `"mode": "write"`,
		`"state": "reserved"`, `"message": "publish timed out"`, `"class": "uncertain"`, `"attempts": 3`,
		`"next_retry_at": "2027-01-15T08:00:00Z"`, `"attachments": [`, `"state": "attaching"`, `"token": "[REDACTED]"`} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("volume JSON lacks %s:\n%s", want, r.body)
		}
	}
	if strings.Contains(string(r.body), "hunter2") {
		t.Fatalf("a secret's value in the volume JSON:\n%s", r.body)
	}
	if got.GetVolume().GetId() != "team/data" || len(got.GetClaims()) != 2 || got.GetClaims()[0].GetAttempts() != 3 {
		t.Fatalf("volume = %v", got)
	}
	if q := f.state.requests("Volumes.Get")[0].(*pb.VolumeGetRequest); q.GetVolumeId() != "team/data" {
		t.Fatalf("get request = %v, want the unescaped ID", q)
	}
	if r := call(t, f.url, "GET", "/v1/volume/csi/nope", ""); r.status != http.StatusNotFound || !strings.Contains(string(r.body), `"not_found"`) {
		t.Fatalf("unknown volume: %d %s, want 404", r.status, r.body)
	}

	r = call(t, f.url, "GET", "/v1/volume/csi/team%2Fdata/claims", "")
	claims, err := apijson.UnmarshalList(r.body, func() *pb.Claim { return &pb.Claim{} })
	if r.status != http.StatusOK || err != nil || len(claims) != 2 || claims[1].GetOperator() != true {
		t.Fatalf("claims: %d %s %v", r.status, r.body, err)
	}
}

// TestVolumeWritesReachTheVolumesService sends each volume write over
// HTTP: register and create take the path's ID (a different one in the
// body is refused), deregister passes ?force, delete takes its secrets
// from the body or the header, expand its range; the reply carries the
// raft index.
func TestVolumeWritesReachTheVolumesService(t *testing.T) {
	f := newFakeServers(t)
	body := func(m proto.Message) string {
		b, err := apijson.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	v := testVolume("", "ebs")
	r := call(t, f.url, "PUT", "/v1/volume/csi/data", body(&pb.VolumeRegisterRequest{Volume: v}))
	resp := &pb.VolumeRegisterResponse{}
	r.wantOK(t, resp)
	if resp.GetVolume().GetId() != "data" || resp.GetWarnings()[0] != "checked by the fake" || r.header.Get(HeaderIndex) == "0" ||
		strings.Contains(string(r.body), "hunter2") {
		t.Fatalf("register answered %s (index %s)", r.body, r.header.Get(HeaderIndex))
	}
	if q := f.state.requests("Volumes.Register")[0].(*pb.VolumeRegisterRequest); q.GetVolume().GetId() != "data" || q.GetVolume().GetSecrets()["token"] != "hunter2" {
		t.Fatalf("register request = %v: want the path's ID and the secrets sent on", q)
	}
	v.Id = "other"
	if r := call(t, f.url, "PUT", "/v1/volume/csi/data", body(&pb.VolumeRegisterRequest{Volume: v})); r.status != http.StatusBadRequest ||
		!strings.Contains(string(r.body), `volume.id \"other\" differs from \"data\"`) {
		t.Fatalf("mismatched ID: %d %s", r.status, r.body)
	}
	if r := call(t, f.url, "PUT", "/v1/volume/csi/data", `{}`); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "volume is required") {
		t.Fatalf("no volume: %d %s", r.status, r.body)
	}
	if r := call(t, f.url, "PUT", "/v1/volume/csi/data", `{"volume": {"capacity": 5}}`); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "capacity") {
		t.Fatalf("unknown field: %d %s", r.status, r.body)
	}

	v.Id = ""
	call(t, f.url, "POST", "/v1/volume/csi/fresh/create", body(&pb.VolumeCreateRequest{Volume: v})).wantOK(t, nil)
	if q := f.state.requests("Volumes.Create"); len(q) != 1 || q[0].(*pb.VolumeCreateRequest).GetVolume().GetId() != "fresh" {
		t.Fatalf("create requests = %v", q)
	}

	f.volumes.put(claimedView("busy", "ebs", "n1"))
	r = call(t, f.url, "DELETE", "/v1/volume/csi/busy", "")
	if r.status != errcode.HTTPStatus(codes.FailedPrecondition) || !strings.Contains(string(r.body), "claimed by alloc a1") || !strings.Contains(string(r.body), `"failed_precondition"`) {
		t.Fatalf("deregister refusal does not name the claim: %s", r.body)
	}
	call(t, f.url, "DELETE", "/v1/volume/csi/busy?force=true", "").wantOK(t, nil)
	if q := f.state.requests("Volumes.Deregister"); len(q) != 2 || q[0].(*pb.VolumeDeregisterRequest).GetForce() || !q[1].(*pb.VolumeDeregisterRequest).GetForce() {
		t.Fatalf("deregister requests = %v", q)
	}
	if r := call(t, f.url, "DELETE", "/v1/volume/csi/busy?force=maybe", ""); r.status != http.StatusBadRequest {
		t.Fatalf("force=maybe: %d %s", r.status, r.body)
	}

	call(t, f.url, "DELETE", "/v1/volume/csi/data/delete", `{"secrets": {"token": "from-body"}}`).wantOK(t, nil)
	req, err := http.NewRequest("DELETE", f.url+"/v1/volume/csi/data/delete", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(HeaderCSISecrets, "token=from-header,region=eu")
	hr, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	hr.Body.Close()
	dq := f.state.requests("Volumes.Delete")
	if hr.StatusCode != http.StatusOK || len(dq) != 2 || dq[0].(*pb.VolumeDeleteRequest).GetSecrets()["token"] != "from-body" ||
		dq[1].(*pb.VolumeDeleteRequest).GetSecrets()["token"] != "from-header" || dq[1].(*pb.VolumeDeleteRequest).GetSecrets()["region"] != "eu" ||
		dq[1].(*pb.VolumeDeleteRequest).GetVolumeId() != "data" {
		t.Fatalf("delete: %d, requests %v", hr.StatusCode, dq)
	}

	r = call(t, f.url, "PUT", "/v1/volume/csi/data/expand", `{"capacity_min_bytes": 2147483648}`)
	exp := &pb.VolumeExpandResponse{}
	r.wantOK(t, exp)
	if exp.GetCapacityBytes() != 2<<30 || !exp.GetNodeExpansionRequired() {
		t.Fatalf("expand answered %s", r.body)
	}
	if q := f.state.requests("Volumes.Expand")[0].(*pb.VolumeExpandRequest); q.GetVolumeId() != "data" {
		t.Fatalf("expand request = %v", q)
	}
	if r := call(t, f.url, "GET", "/v1/volume/csi/data/create", ""); r.status != http.StatusMethodNotAllowed {
		t.Fatalf("GET create: %d %s, want 405", r.status, r.body)
	}
}

// TestSnapshotEndpoints: create takes a body, list pages with the
// plugin's own token and reads secrets from the header, delete needs the
// plugin and snapshot IDs; a malformed secrets header is refused without
// echoing what it carried.
func TestSnapshotEndpoints(t *testing.T) {
	f := newFakeServers(t)
	r := call(t, f.url, "PUT", "/v1/volumes/snapshot", `{"volume_id": "data", "name": "nightly", "secrets": {"token": "s"}}`)
	snap := &pb.Snapshot{}
	r.wantOK(t, snap)
	if snap.GetId() != "snap-nightly" || snap.GetVolumeId() != "data" {
		t.Fatalf("create answered %s", r.body)
	}
	if q := f.state.requests("Volumes.CreateSnapshot")[0].(*pb.SnapshotCreateRequest); q.GetSecrets()["token"] != "s" {
		t.Fatalf("create request = %v", q)
	}

	c, err := api.NewClient(f.url)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	snaps, meta, err := c.Volumes().Snapshots(ctx, "ebs", map[string]string{"token": "t1"}, &api.QueryOptions{Params: map[string]string{"volume_id": "data"}})
	if err != nil || len(snaps) != 1 || snaps[0].GetId() != "snap-1" || meta.NextToken != "plugin-token-2" {
		t.Fatalf("first snapshot page: %v %v %v", snaps, meta, err)
	}
	snaps, meta, err = c.Volumes().Snapshots(ctx, "ebs", nil, &api.QueryOptions{NextToken: meta.NextToken})
	if err != nil || len(snaps) != 1 || snaps[0].GetId() != "snap-2" || meta.NextToken != "" {
		t.Fatalf("second snapshot page: %v %v %v", snaps, meta, err)
	}
	lq := f.state.requests("Volumes.ListSnapshots")
	if first := lq[0].(*pb.SnapshotListRequest); first.GetPluginId() != "ebs" || first.GetVolumeId() != "data" || first.GetSecrets()["token"] != "t1" {
		t.Fatalf("list request = %v", first)
	}
	if second := lq[1].(*pb.SnapshotListRequest); second.GetQuery().GetNextToken() != "plugin-token-2" || len(second.GetSecrets()) != 0 {
		t.Fatalf("second list request = %v", second)
	}

	if err := c.Volumes().DeleteSnapshot(ctx, "ebs", "snap-1", map[string]string{"token": "t2"}); err != nil {
		t.Fatal(err)
	}
	if q := f.state.requests("Volumes.DeleteSnapshot")[0].(*pb.SnapshotDeleteRequest); q.GetPluginId() != "ebs" || q.GetSnapshotId() != "snap-1" || q.GetSecrets()["token"] != "t2" {
		t.Fatalf("delete request = %v", q)
	}
	if r := call(t, f.url, "DELETE", "/v1/volumes/snapshot?plugin_id=ebs", ""); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "snapshot_id") {
		t.Fatalf("delete without snapshot_id: %d %s", r.status, r.body)
	}

	req, err := http.NewRequest("GET", f.url+"/v1/volumes/snapshot?plugin_id=ebs", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(HeaderCSISecrets, "token=ok,hunter2")
	hr, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer hr.Body.Close()
	hb, err := io.ReadAll(hr.Body)
	if err != nil {
		t.Fatal(err)
	}
	if hr.StatusCode != http.StatusBadRequest || !strings.Contains(string(hb), "entry 2 is not key=value") || strings.Contains(string(hb), "hunter2") {
		t.Fatalf("malformed secrets header: %d %s", hr.StatusCode, hb)
	}
	if n := len(f.state.requests("Volumes.ListSnapshots")); n != 2 {
		t.Fatalf("the malformed header reached the servers (%d list requests)", n)
	}
}

// TestRoutesMergeMethodsOfOnePath: a path given in two handle calls (the
// claim list here, the claim writes in another file) answers both sets of
// methods and 405 for the rest; one method twice panics at startup.
func TestRoutesMergeMethodsOfOnePath(t *testing.T) {
	rt := newRouter(hclog.NewNullLogger())
	answer := func(word string) handlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) error { return writeJSON(w, word) }
	}
	rt.handle("/v1/volume/csi/{id}/claims", map[string]handlerFunc{"GET": answer("list")})
	rt.handle("/v1/volume/csi/{id}/claims", writeMethods(answer("claim")))
	srv := httptest.NewServer(rt.mux)
	t.Cleanup(srv.Close)
	for method, want := range map[string]string{"GET": `"list"`, "PUT": `"claim"`, "POST": `"claim"`} {
		if r := call(t, srv.URL, method, "/v1/volume/csi/data/claims", ""); r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != want {
			t.Errorf("%s: %d %s, want %s", method, r.status, r.body, want)
		}
	}
	if r := call(t, srv.URL, "DELETE", "/v1/volume/csi/data/claims", ""); r.status != http.StatusMethodNotAllowed {
		t.Errorf("DELETE: %d %s, want 405", r.status, r.body)
	}
	defer func() {
		if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), "GET /v1/volume/csi/{id}/claims registered twice") {
			t.Errorf("a method registered twice: recovered %v", p)
		}
	}()
	rt.handle("/v1/volume/csi/{id}/claims", map[string]handlerFunc{"GET": answer("again")})
}
