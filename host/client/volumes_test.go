package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/fsm"
	"berth.dev/berth/host/client/state"
	"berth.dev/berth/host/server"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
	"berth.dev/berth/taskdrivers"
)

var _ volumeStore = (*state.DB)(nil)

// volumeEnv is a real server and a client with a fake node plugin (no
// controller publish needed, STAGE_UNSTAGE) and volume vol1 registered.
type volumeEnv struct {
	t        *testing.T
	s        *server.Server
	addr     string
	conn     grpc.ClientConnInterface
	fake     *csifake.Plugin
	dir      string
	db       *state.DB
	m        *taskdrivers.Manager
	c        *Client
	vols     pb.VolumesClient
	ctx      context.Context
	endpoint string
}

func newVolumeEnv(t *testing.T) *volumeEnv {
	t.Helper()
	e := &volumeEnv{t: t, s: startServer(t)}
	e.addr = serverRPC(t, e.s)
	pool := rpc.NewPool()
	t.Cleanup(pool.Close)
	conn, err := pool.Conn(e.addr)
	if err != nil {
		t.Fatal(err)
	}
	e.conn = conn
	sockDir, err := os.MkdirTemp("", "csiv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	e.fake = csifake.New()
	e.fake.GetPluginCapabilities.Always(&csipb.GetPluginCapabilitiesResponse{}, nil)
	srv, err := e.fake.Listen(filepath.Join(sockDir, "csi.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	e.endpoint = srv.Endpoint
	e.dir = t.TempDir()
	e.db, e.m = driversFor(t, e.dir)
	ctx, cancel := context.WithTimeout(context.Background(), 4*generous)
	t.Cleanup(cancel)
	e.ctx = ctx
	e.start()
	e.vols = pb.NewVolumesClient(conn)
	if _, err := e.vols.Register(ctx, &pb.VolumeRegisterRequest{Volume: &pb.Volume{Id: "vol1", Name: "vol1", PluginId: "fake", ExternalId: "ext-vol1",
		Capabilities: []*pb.VolumeCapability{{AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER,
			AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}}}}); err != nil {
		t.Fatal(err)
	}
	return e
}

// start starts the client (again, after stop: a client restart, the
// plugin's registry entry restored from the state DB), waits for its node
// and the plugin to be ready.
func (e *volumeEnv) start() {
	t := e.t
	c, reg := csiNode(t, e.dir, e.addr, e.db, e.m, "client")
	e.c = c
	t.Cleanup(func() {
		if e.c != nil {
			e.c.Shutdown()
		}
	})
	waitStatus(t, e.s, c.NodeID(), pb.NodeStatus_NODE_STATUS_READY)
	if _, ok := reg.Serving(pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE, "fake"); !ok {
		// What the supervisor hook does for a healthy plugin task.
		if err := reg.Register(&pb.CSIPluginRegistration{Type: pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE, PluginId: "fake", AllocId: pluginAlloc,
			Endpoint: e.endpoint, Provider: csifake.Name, ProviderVersion: csifake.VendorVersion, Healthy: true}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, generous, func() error {
		resp, err := pb.NewCSIPluginsClient(e.conn).Get(e.ctx, &pb.CSIPluginGetRequest{PluginId: "fake"})
		if err != nil {
			return err
		}
		if !resp.GetPlugin().GetSchedulable() {
			return fmt.Errorf("plugin not schedulable yet: %v", resp.GetPlugin())
		}
		return nil
	})
}

func (e *volumeEnv) stop() {
	e.c.Shutdown()
	e.c = nil
}

// pluginAlloc stands for the plugin task's alloc.
const pluginAlloc = "6d1f3c2a-5b4e-4c7d-8e9f-0a1b2c3d4e5f"

// runJob runs a raw_exec task mounting vol1 as "data"; the task writes
// its BERTH_VOLUME_DATA and ${volume.data} in the alloc dir. It returns the alloc ID and
// what the task saw.
func (e *volumeEnv) runJob() (*pb.Job, string, string) {
	t := e.t
	task := &pb.Task{Name: "web", Driver: "raw_exec", KillTimeoutMs: 2000, Resources: &pb.TaskResources{CpuMhz: 100, MemoryMb: 64},
		VolumeMounts: []*pb.VolumeMount{{Volume: "data", Destination: "/data"}},
		Config: sdk.ConfigMap{"command": sdk.StringValue("/bin/sh"),
			"args": sdk.ListValue("-c", `echo "$BERTH_VOLUME_DATA ${volume.data}" > "$BERTH_ALLOC_DIR/volume.txt"; while true; do sleep 0.05; done`)}}
	job := mockJob(pb.JobType_JOB_TYPE_SERVICE, task)
	job.Groups[0].Volumes = map[string]*pb.VolumeRequest{"data": {Name: "data", Type: "csi", Source: "vol1",
		AccessMode: "single-node-writer", AttachmentMode: "file-system"}}
	if _, err := pb.NewJobsClient(e.conn).Register(e.ctx, &pb.JobRegisterRequest{Job: job}); err != nil {
		t.Fatal(err)
	}
	var allocID, seen string
	testutil.WaitFor(t, generous, func() error {
		for id := range e.c.knownAllocs() {
			r, err := e.c.runner(id)
			if err != nil {
				continue
			}
			b, err := os.ReadFile(filepath.Join(r.Dir().Shared, "volume.txt"))
			if err != nil {
				return fmt.Errorf("the task has not written its volume path yet: %w", err)
			}
			// The shell creates the file before it writes to it.
			if strings.TrimSpace(string(b)) == "" {
				return errors.New("the task has not written its volume path yet: the file is empty")
			}
			allocID, seen = id, strings.TrimSpace(string(b))
			return nil
		}
		return errors.New("no alloc yet")
	})
	return job, allocID, seen
}

// claim returns vol1's claims: the first one's state and how many.
func (e *volumeEnv) claim() (pb.ClaimState, int, error) {
	resp, err := e.vols.Claims(e.ctx, &pb.VolumeClaimsRequest{VolumeId: "vol1"})
	if err != nil {
		return 0, 0, err
	}
	if len(resp.GetClaims()) == 0 {
		return pb.ClaimState_CLAIM_STATE_FREED, 0, nil
	}
	return resp.GetClaims()[0].GetState(), len(resp.GetClaims()), nil
}

func (e *volumeEnv) waitClaim(want pb.ClaimState) {
	e.t.Helper()
	testutil.WaitFor(e.t, generous, func() error {
		st, n, err := e.claim()
		if err != nil || st != want || (want != pb.ClaimState_CLAIM_STATE_FREED && n != 1) {
			return fmt.Errorf("claims: %d, first %s (%v); want %s", n, st, err, want)
		}
		return nil
	})
}

// waitTornDown waits until the fake plugin saw n unpublish and unstage
// calls and the client holds no usage and no report.
func (e *volumeEnv) waitTornDown(n int) {
	e.t.Helper()
	testutil.WaitFor(e.t, generous, func() error {
		if up, us := e.fake.NodeUnpublishVolume.Count(), e.fake.NodeUnstageVolume.Count(); up != n || us != n {
			return fmt.Errorf("unpublish %d, unstage %d; want %d", up, us, n)
		}
		if usages, err := e.db.VolumeUsages(); err != nil || len(usages) != 0 {
			return fmt.Errorf("volume usage left in the state DB: %v, %v", usages, err)
		}
		if reps, err := e.db.VolumeReports(); err != nil || len(reps) != 0 {
			return fmt.Errorf("reports still queued: %v, %v", reps, err)
		}
		return nil
	})
}

// The whole client side against a real server: a job whose group asks for
// a CSI volume is placed with its claim; the client stages and publishes
// it through the node plugin, the raw_exec task sees its publish path in
// BERTH_VOLUME_DATA, and the claim is in use. Stopped, the alloc's volume
// is unpublished and unstaged, the client reports node-detached, and the
// claim is freed (the plugin needs no controller publish).
func TestAllocWithACSIVolumeEndToEnd(t *testing.T) {
	e := newVolumeEnv(t)
	job, allocID, seen := e.runJob()
	if want := filepath.Join(e.dir, "csi", "publish", allocID, "vol1"); seen != want+" "+want {
		t.Fatalf("the task saw BERTH_VOLUME_DATA and ${volume.data} = %q, want %q twice", seen, want)
	}
	if st, pu := e.fake.NodeStageVolume.Count(), e.fake.NodePublishVolume.Count(); st != 1 || pu != 1 {
		t.Fatalf("stage %d, publish %d; want 1 and 1", st, pu)
	}
	e.waitClaim(pb.ClaimState_CLAIM_STATE_IN_USE)

	if _, err := pb.NewJobsClient(e.conn).Deregister(e.ctx, &pb.JobDeregisterRequest{JobId: job.GetId()}); err != nil {
		t.Fatal(err)
	}
	e.waitTornDown(1)
	e.waitClaim(pb.ClaimState_CLAIM_STATE_FREED)
	if got := e.fake.NodeUnpublishVolume.Last().GetTargetPath(); got != filepath.Join(e.dir, "csi", "volumes", "fake", "publish", allocID, "vol1") {
		t.Errorf("unpublished target %q", got)
	}
}

// A client restart keeps the running task's volume: nothing is staged,
// published or unstaged again. A client that comes back after its claim
// was force-released (its node fenced while it was away, the job stopped)
// still unpublishes and unstages what it has.
func TestVolumeSurvivesClientRestartAndForceReleaseIsCleanedUp(t *testing.T) {
	e := newVolumeEnv(t)
	job, allocID, _ := e.runJob()
	e.waitClaim(pb.ClaimState_CLAIM_STATE_IN_USE)

	e.stop()
	e.start()
	testutil.WaitFor(t, generous, func() error {
		_, states, err := e.c.AllocStates(allocID)
		if err != nil || states["web"].GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING {
			return fmt.Errorf("recovered task: %v, %v", states["web"], err)
		}
		return nil
	})
	e.waitClaim(pb.ClaimState_CLAIM_STATE_IN_USE)
	if st, pu, us := e.fake.NodeStageVolume.Count(), e.fake.NodePublishVolume.Count(), e.fake.NodeUnstageVolume.Count(); st != 1 || pu != 1 || us != 0 {
		t.Fatalf("after a client restart: stage %d, publish %d, unstage %d; want 1, 1, 0", st, pu, us)
	}

	// Away: the job is stopped and the node fenced, which frees the claim
	// without the client.
	nodeID := e.c.NodeID()
	e.stop()
	if _, err := pb.NewJobsClient(e.conn).Deregister(e.ctx, &pb.JobDeregisterRequest{JobId: job.GetId()}); err != nil {
		t.Fatal(err)
	}
	e.waitClaim(pb.ClaimState_CLAIM_STATE_RELEASING)
	buf, err := fsm.Encode(fsm.NodeFence, &pb.NodeFenceCommand{NodeId: nodeID, Fenced: true, UpdatedAt: time.Now().UnixNano()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fsm.ResultOf(e.ctx, e.s.Raft().Apply(buf, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	e.waitClaim(pb.ClaimState_CLAIM_STATE_FREED)
	if us := e.fake.NodeUnstageVolume.Count(); us != 0 {
		t.Fatalf("unstaged while the client was away (%d calls)", us)
	}

	// Back: the alloc is stopped, and its volume taken down.
	e.start()
	e.waitTornDown(1)
	if pu := e.fake.NodePublishVolume.Count(); pu != 1 {
		t.Errorf("published again on the way back (%d calls)", pu)
	}
}

// An operator's claim (`berth volume claim`) is published on its node at
// the path the servers print, and reported in use; released, it is taken
// down and freed.
func TestOperatorClaimPublishedOnItsNode(t *testing.T) {
	e := newVolumeEnv(t)
	claims := pb.NewClaimsClient(e.conn)
	made, err := claims.Claim(e.ctx, &pb.ClaimCreateRequest{VolumeId: "vol1", NodeId: e.c.NodeID(), Mode: pb.ClaimMode_CLAIM_MODE_READ})
	if err != nil {
		t.Fatal(err)
	}
	e.waitClaim(pb.ClaimState_CLAIM_STATE_IN_USE)
	path := filepath.Join(e.dir, made.GetPublishPath())
	if link, err := os.Readlink(path); err != nil || link != filepath.Join(e.dir, "csi", "volumes", "fake", "publish", made.GetClaim().GetId(), "vol1") {
		t.Fatalf("the printed path %s links to %q (%v)", path, link, err)
	}
	if pub := e.fake.NodePublishVolume.Last(); !pub.GetReadonly() {
		t.Errorf("a read claim published writable: %v", pub)
	}
	if _, err := claims.Release(e.ctx, &pb.ClaimReleaseRequest{ClaimId: made.GetClaim().GetId()}); err != nil {
		t.Fatal(err)
	}
	e.waitTornDown(1)
	e.waitClaim(pb.ClaimState_CLAIM_STATE_FREED)
}

// blockingClaims is a Claims service whose ClientClaim waits until its
// caller gives up.
type blockingClaims struct {
	pb.UnimplementedClaimsServer
	calls chan struct{}
}

func (b *blockingClaims) ClientClaim(ctx context.Context, _ *pb.ClientClaimRequest) (*pb.ClientClaimResponse, error) {
	b.calls <- struct{}{}
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

func serveClaims(t *testing.T, b *blockingClaims) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	pb.RegisterClaimsServer(s, b)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// A hook that gives up on its claim (its alloc stopped) ends the call
// without trying the next server: its context ending is not a server's
// failure.
func TestClaimCallEndsWithItsCaller(t *testing.T) {
	b1, b2 := &blockingClaims{calls: make(chan struct{}, 4)}, &blockingClaims{calls: make(chan struct{}, 4)}
	c, err := New(Config{DataDir: t.TempDir(), Servers: []string{serveClaims(t, b1), serveClaims(t, b2)}, Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := claimsClient{c}.ClientClaim(ctx, &pb.ClientClaimRequest{NodeId: c.NodeID(), AllocId: pluginAlloc, VolumeId: "vol1",
			Query: &pb.QueryOptions{MinIndex: 5}})
		errc <- err
	}()
	select {
	case <-b1.calls:
	case <-b2.calls:
	case <-time.After(generous):
		t.Fatal("no server got the call")
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), `volume "vol1"`) {
			t.Fatalf("call ended with %v, want the caller's Canceled naming the volume", err)
		}
		if n := strings.Count(err.Error(), "server 127.0.0.1:"); n != 1 {
			t.Fatalf("call ended with %v: %d servers tried, want the one the caller gave up on", err, n)
		}
	case <-time.After(generous):
		t.Fatal("the call did not end with its caller")
	}
	if n := len(b1.calls) + len(b2.calls); n != 0 {
		t.Fatalf("the next server was tried after the caller gave up (%d more calls)", n)
	}
}
