package volumehooks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/csi"
	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/csi/volumemanager"
	"berth.dev/berth/internal/runhooks"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

const (
	volNodeID = "5e0c8f5e-0000-4000-8000-000000000001"
	volWait   = 10 * time.Second
)

// fakeClaims is the servers' Claims service: claims by "<alloc or
// claim>/<volume>", a raft-like index that moves with every change, and
// blocking ClientClaim calls that wake when it moves past min_index.
type fakeClaims struct {
	mu      sync.Mutex
	index   uint64
	changed chan struct{}
	claims  map[string]*pb.ClientClaimResponse
	// ops are the node's operators' claims ClientClaims lists.
	ops map[string]*pb.Claim
	// updates are the ClientClaimUpdate requests that succeeded.
	updates []*pb.ClientClaimUpdateRequest
	// calls counts ClientClaim calls; blocked counts those that blocked.
	calls, blocked int
	// listedTo is the highest min_index a ClientClaims call asked with:
	// the lister acted on every list up to it.
	listedTo uint64
	// failClaim and failUpdate, when set, answer every call.
	failClaim, failUpdate error
}

var _ Claims = (*fakeClaims)(nil)

func newFakeClaims() *fakeClaims {
	return &fakeClaims{index: 10, changed: make(chan struct{}), claims: map[string]*pb.ClientClaimResponse{}, ops: map[string]*pb.Claim{}}
}

func claimKey(user, volume string) string { return user + "/" + volume }

// set stores (or changes) a claim and moves the index.
func (f *fakeClaims) set(user string, resp *pb.ClientClaimResponse) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.index++
	resp.Meta = &pb.QueryMeta{Index: f.index}
	f.claims[claimKey(user, resp.GetVolume().GetId())] = resp
	close(f.changed)
	f.changed = make(chan struct{})
}

// waitListed waits until the lister asked for the lists after the
// current index: it acted on the list of every change made so far.
func (f *fakeClaims) waitListed(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	idx := f.index
	f.mu.Unlock()
	testutil.WaitFor(t, volWait, func() error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.listedTo < idx {
			return fmt.Errorf("operator claims listed up to index %d, want %d", f.listedTo, idx)
		}
		return nil
	})
}

// setOperator stores an operator's claim (listed and answered), or with
// st freed drops it from both.
func (f *fakeClaims) setOperator(claimID string, st pb.ClaimState) {
	resp := claimResp(st)
	resp.Claim.Id, resp.Claim.AllocId, resp.Claim.Operator, resp.Request = claimID, "", true, nil
	f.mu.Lock()
	defer f.mu.Unlock()
	f.index++
	resp.Meta = &pb.QueryMeta{Index: f.index}
	if st == pb.ClaimState_CLAIM_STATE_FREED {
		delete(f.ops, claimID)
		delete(f.claims, claimKey(claimID, volID))
	} else {
		f.ops[claimID] = resp.Claim
		f.claims[claimKey(claimID, volID)] = resp
	}
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeClaims) ClientClaims(ctx context.Context, req *pb.ClientClaimsRequest) (*pb.ClientClaimsResponse, error) {
	f.mu.Lock()
	f.listedTo = max(f.listedTo, req.GetQuery().GetMinIndex())
	f.mu.Unlock()
	for {
		f.mu.Lock()
		idx, changed := f.index, f.changed
		if idx > req.GetQuery().GetMinIndex() {
			out := &pb.ClientClaimsResponse{Meta: &pb.QueryMeta{Index: idx}}
			for _, c := range f.ops {
				out.Claims = append(out.Claims, proto.CloneOf(c))
			}
			f.mu.Unlock()
			return out, nil
		}
		f.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
}

func (f *fakeClaims) fail(claim, update error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failClaim, f.failUpdate = claim, update
}

func (f *fakeClaims) ClientClaim(ctx context.Context, req *pb.ClientClaimRequest) (*pb.ClientClaimResponse, error) {
	user, vol := req.GetAllocId(), req.GetVolumeId()
	if user == "" {
		// Named by claim ID alone, as the client does an operator's.
		user, vol = req.GetClaimId(), volID
	}
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
	for {
		f.mu.Lock()
		if f.failClaim != nil {
			err := f.failClaim
			f.mu.Unlock()
			return nil, err
		}
		resp, ok := f.claims[claimKey(user, vol)]
		idx, changed := f.index, f.changed
		if ok && idx > req.GetQuery().GetMinIndex() {
			out := proto.CloneOf(resp)
			f.mu.Unlock()
			return out, nil
		}
		if !ok && req.GetQuery().GetMinIndex() == 0 {
			f.mu.Unlock()
			return nil, status.Error(codes.NotFound, "claim not found")
		}
		f.blocked++
		f.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
}

func (f *fakeClaims) ClientClaimUpdate(_ context.Context, req *pb.ClientClaimUpdateRequest) (*pb.ClientClaimUpdateResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failUpdate != nil {
		return nil, f.failUpdate
	}
	f.updates = append(f.updates, proto.CloneOf(req))
	return &pb.ClientClaimUpdateResponse{}, nil
}

func (f *fakeClaims) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func (f *fakeClaims) blockedCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.blocked
}

// waitUpdate waits until an update of user's claim on volume to state
// (with an error when withErr) was delivered, and returns it.
func (f *fakeClaims) waitUpdate(t *testing.T, user, volume string, state pb.ClaimState, withErr bool) *pb.ClientClaimUpdateRequest {
	t.Helper()
	var got *pb.ClientClaimUpdateRequest
	testutil.WaitFor(t, volWait, func() error {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, u := range f.updates {
			if (u.GetAllocId() == user || u.GetClaimId() == user) && u.GetVolumeId() == volume && u.GetState() == state && (u.GetError() != nil) == withErr {
				got = u
				return nil
			}
		}
		return errors.New("no such update delivered yet")
	})
	return got
}

// memReports is a ReportStore in memory, on a disk that is full while
// full is set.
type memReports struct {
	mu   sync.Mutex
	recs map[string]*pb.VolumeReportRecord
	full atomic.Bool
}

func (s *memReports) PutVolumeReport(rec *pb.VolumeReportRecord) error {
	if s.full.Load() {
		return errors.New("write state.db: no space left on device")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs[reportKey(rec.GetRequest())] = proto.CloneOf(rec)
	return nil
}

func (s *memReports) DeleteVolumeReport(req *pb.ClientClaimUpdateRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.recs, reportKey(req))
	return nil
}

func (s *memReports) VolumeReports() ([]*pb.VolumeReportRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*pb.VolumeReportRecord
	for _, r := range s.recs {
		out = append(out, proto.CloneOf(r))
	}
	return out, nil
}

func (s *memReports) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.recs)
}

// memUsage is volumemanager.Store in memory.
type memUsage struct {
	mu   sync.Mutex
	recs map[string]*pb.VolumeUsageRecord
}

func (s *memUsage) PutVolumeUsage(rec *pb.VolumeUsageRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs[rec.GetVolumeId()] = proto.CloneOf(rec)
	return nil
}

func (s *memUsage) DeleteVolumeUsage(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.recs, id)
	return nil
}

func (s *memUsage) VolumeUsages() ([]*pb.VolumeUsageRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*pb.VolumeUsageRecord
	for _, r := range s.recs {
		out = append(out, proto.CloneOf(r))
	}
	return out, nil
}

// gatedPlugins hands out one fake plugin as every node plugin, once open.
type gatedPlugins struct {
	client *csi.Client
	mu     sync.Mutex
	open   chan struct{}
	// expand is the node service's EXPAND_VOLUME (volume_expand_test.go).
	expand bool
}

func (g *gatedPlugins) WaitNode(ctx context.Context, pluginID string) (volumemanager.Plugin, error) {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
		return volumemanager.Plugin{Node: g.client.Node, StageUnstage: true, Expand: g.expand}, nil
	case <-ctx.Done():
		return volumemanager.Plugin{}, errors.Join(errors.New("no node instance of plugin "+pluginID), ctx.Err())
	}
}

func (g *gatedPlugins) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = make(chan struct{})
}

func (g *gatedPlugins) reopen() {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.open)
}

// volEnv is a client's volume hooks over a fake plugin and fake servers;
// restart builds them again on the same stores, as a client restart does.
type volEnv struct {
	t       *testing.T
	dir     string
	plugin  *csifake.Plugin
	plugins *gatedPlugins
	claims  *fakeClaims
	usage   *memUsage
	reports *memReports
	events  *eventLog

	hooks  *VolumeHooks
	rep    *Reporter
	cancel context.CancelFunc
	tweak  func(*VolumeConfig)
}

func newVolEnv(t *testing.T, tweak func(*VolumeConfig)) *volEnv {
	t.Helper()
	sockDir, err := os.MkdirTemp("", "vh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	p := csifake.New()
	srv, err := p.Listen(filepath.Join(sockDir, "csi.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	c, err := csi.Dial(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	open := make(chan struct{})
	close(open)
	e := &volEnv{t: t, dir: t.TempDir(), plugin: p, plugins: &gatedPlugins{client: c, open: open}, claims: newFakeClaims(),
		usage: &memUsage{recs: map[string]*pb.VolumeUsageRecord{}}, reports: &memReports{recs: map[string]*pb.VolumeReportRecord{}},
		events: &eventLog{}, tweak: tweak}
	e.start()
	t.Cleanup(e.stop)
	return e
}

func (e *volEnv) start() {
	t := e.t
	m, err := volumemanager.New(volumemanager.Config{DataDir: e.dir, NodeID: volNodeID, Store: e.usage, Plugins: e.plugins,
		Logger: testutil.Logger(t), Retry: csi.Retry{Initial: time.Millisecond, Max: 5 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	e.rep, err = NewReporter(ReporterConfig{Claims: e.claims, Store: e.reports, Logger: testutil.Logger(t),
		RetryStart: time.Millisecond, RetryMax: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	cfg := VolumeConfig{DataDir: e.dir, NodeID: volNodeID, Claims: e.claims, Volumes: m, Plugins: e.plugins, Reports: e.rep,
		Logger: testutil.Logger(t), Context: ctx, RetryStart: time.Millisecond, RetryMax: 5 * time.Millisecond,
		TeardownRetry: time.Millisecond, TeardownRetryMax: 5 * time.Millisecond}
	if e.tweak != nil {
		e.tweak(&cfg)
	}
	e.hooks, err = NewVolumeHooks(cfg)
	if err != nil {
		t.Fatal(err)
	}
	go e.rep.Run(ctx)
}

func (e *volEnv) stop() {
	e.cancel()
	e.hooks.Wait()
}

// restart is a client restart: everything in memory is rebuilt from the
// stores.
func (e *volEnv) restart() {
	e.stop()
	e.start()
}

const (
	hookAlloc = "0b5c1e7a-4a39-4f3e-9d6b-2f0c1a8e9d22"
	volID     = "data-vol"
)

func volumeGroup() *pb.TaskGroup {
	return &pb.TaskGroup{Name: "g", Volumes: map[string]*pb.VolumeRequest{
		"data":    {Name: "data", Type: "csi", Source: volID, MountOptions: &pb.MountOptions{MountFlags: []string{"noatime"}}},
		"scratch": {Name: "scratch", Type: "host", Source: "scratch"},
	}}
}

func volumeAlloc() *pb.Allocation {
	return &pb.Allocation{Id: hookAlloc, NodeId: volNodeID, TaskGroup: "g", CreateIndex: 7}
}

// claimResp is the servers' answer for the alloc's claim in state st.
func claimResp(st pb.ClaimState) *pb.ClientClaimResponse {
	return &pb.ClientClaimResponse{
		Volume: &pb.Volume{Id: volID, PluginId: "hostpath", ExternalId: "ext-1", Secrets: map[string]string{"k": "s"}},
		Claim: &pb.Claim{Id: "claim-1", VolumeId: volID, AllocId: hookAlloc, NodeId: volNodeID, Mode: pb.ClaimMode_CLAIM_MODE_WRITE, State: st,
			AccessMode:     pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER,
			AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM},
		PublishContext: map[string]string{"device": "/dev/x"},
		Request:        volumeGroup().GetVolumes()["data"],
	}
}

func (e *volEnv) hook() *volumeHook {
	e.t.Helper()
	h := e.hooks.AllocHook()(runhooks.AllocInfo{Alloc: volumeAlloc(), Group: volumeGroup()})
	if h == nil {
		e.t.Fatal("no volume hook for a group with a csi volume")
	}
	return h.(*volumeHook)
}

func (e *volEnv) prerun(recovered bool) error {
	return e.hook().Prerun(context.Background(), &runhooks.PrerunRequest{
		AllocInfo: runhooks.AllocInfo{Alloc: volumeAlloc(), Group: volumeGroup(), Events: e.events}, Recovered: recovered})
}

func (e *volEnv) postrun() error {
	return e.hook().Postrun(context.Background(), &runhooks.PostrunRequest{
		AllocInfo: runhooks.AllocInfo{Alloc: volumeAlloc(), Group: volumeGroup(), Events: e.events}})
}
