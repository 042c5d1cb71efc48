package server

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/endpoints"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/internal/version"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// lockedBuffer collects a server's log lines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// volumeCluster is one server whose log is kept (at trace level), a
// registered node whose tunnel serves p as the controller (and node) of
// plugin "hp", reported healthy with every controller capability.
func volumeCluster(t *testing.T, p *csifake.Plugin) (*testCluster, *Server, pb.VolumesClient, *pb.Node, *lockedBuffer) {
	t.Helper()
	return volumeClusterAt(t, p, version.Version)
}

// volumeClusterAt is volumeCluster with its server recording version ver.
func volumeClusterAt(t *testing.T, p *csifake.Plugin, ver string) (*testCluster, *Server, pb.VolumesClient, *pb.Node, *lockedBuffer) {
	t.Helper()
	logs := &lockedBuffer{}
	tc := newTestCluster(t, 1, withVersion(ver), func(c *testConfig) {
		c.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Trace, Output: logs})
	})
	s := tc.servers[0]
	n := testNode("n1")
	if _, err := tc.register(s, n); err != nil {
		t.Fatal(err)
	}
	ctl := &pb.CSIControllerInfo{SupportsCreateDelete: true, SupportsAttachDetach: true, SupportsCreateDeleteSnapshot: true,
		SupportsListSnapshots: true, SupportsExpand: true}
	updateCSI(t, pb.NewCSIPluginsClient(tc.conn(s)), &pb.NodeCSIUpdateRequest{NodeId: n.GetId(),
		Controllers: map[string]*pb.CSIPluginInfo{"hp": {Healthy: true, Provider: "hostpath.berth.dev", ProviderVersion: "1.0", ControllerRequired: true, ControllerInfo: ctl}},
		Nodes:       map[string]*pb.CSIPluginInfo{"hp": {Healthy: true, Provider: "hostpath.berth.dev", ProviderVersion: "1.0"}},
	})
	connectCSINode(t, n.GetId(), "hp", p, s)
	return tc, s, pb.NewVolumesClient(tc.conn(s)), n, logs
}

func fsVolume(id string) *pb.Volume {
	return &pb.Volume{Id: id, PluginId: "hp", ExternalId: "ext-" + id,
		Capabilities: []*pb.VolumeCapability{{AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER,
			AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}},
		MountOptions: &pb.MountOptions{FsType: "ext4"},
	}
}

// Register asks a healthy controller to validate the capabilities: a
// confirmation registers, a confirmation of something else than was sent
// is refused naming the field (FailedPrecondition, not a plugin fault), a
// plugin error keeps its code; every refusal names the volume. (An answer
// without `confirmed` registers with a warning:
// TestVolumeRegisterTakesAnUnconfirmedAnswerAsAWarning.)
func TestVolumeRegisterValidatesWithTheController(t *testing.T) {
	p := csifake.New()
	_, _, vols, _, _ := volumeCluster(t, p)

	v := fsVolume("data")
	// An old plugin confirming a capability it was not asked for.
	p.ValidateVolumeCapabilities.Next(&csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeCapabilities: []*csipb.VolumeCapability{{AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
			AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}}}}}}, nil)
	_, err := vols.Register(ctx10s(t), &pb.VolumeRegisterRequest{Volume: v})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "volume_capabilities[0].access_mode.mode") || !strings.Contains(err.Error(), `volume "data"`) {
		t.Fatalf("echo mismatch: %v", err)
	}
	p.ValidateVolumeCapabilities.Next(nil, status.Error(codes.NotFound, "no volume ext-data"))
	_, err = vols.Register(ctx10s(t), &pb.VolumeRegisterRequest{Volume: v})
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "no volume ext-data") {
		t.Fatalf("plugin NotFound: %v", err)
	}
	if got, err := vols.Get(ctx10s(t), &pb.VolumeGetRequest{VolumeId: "data"}); status.Code(err) != codes.NotFound {
		t.Fatalf("a refused volume is registered: %v %v", got, err)
	}

	// Confirmed: the plugin saw what the spec says, and it is registered.
	p.ValidateVolumeCapabilities.Next(&csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeCapabilities: endpoints.CSICapabilities(v)}}, nil)
	resp, err := vols.Register(ctx10s(t), &pb.VolumeRegisterRequest{Volume: v})
	if err != nil {
		t.Fatal(err)
	}
	asked := p.ValidateVolumeCapabilities.Last()
	if asked.GetVolumeId() != "ext-data" || asked.GetVolumeCapabilities()[0].GetMount().GetFsType() != "ext4" ||
		asked.GetVolumeCapabilities()[0].GetAccessMode().GetMode() != csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER {
		t.Errorf("the plugin was asked %v", asked)
	}
	got := resp.GetVolume()
	if got.GetName() != "data" || got.GetProvider() != "hostpath.berth.dev" || !got.GetControllerRequired() || got.GetCreateIndex() == 0 || resp.GetMeta().GetIndex() == 0 {
		t.Errorf("registered %v", got)
	}
	if len(resp.GetWarnings()) != 0 {
		t.Errorf("warnings %q", resp.GetWarnings())
	}

	// Invalid specs are refused before any plugin call, every problem at once.
	calls := p.ValidateVolumeCapabilities.Count()
	bad := &pb.Volume{Id: "a/b", Capabilities: []*pb.VolumeCapability{{}}}
	_, err = vols.Register(ctx10s(t), &pb.VolumeRegisterRequest{Volume: bad})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad spec: %v", err)
	}
	for _, want := range []string{"id: ", "plugin_id: is required", "external_id: is required", "capability[0].access_mode: is required", "capability[0].attachment_mode: is required"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("bad spec error %q lacks %q", err, want)
		}
	}
	if p.ValidateVolumeCapabilities.Count() != calls {
		t.Error("an invalid spec reached the plugin")
	}
}

// A plugin without a controller service is registered unvalidated, with a
// warning saying so; a plugin no node reports is refused naming it.
func TestVolumeRegisterWithoutAControllerWarns(t *testing.T) {
	p := csifake.New()
	tc, s, vols, n, _ := volumeCluster(t, p)
	updateCSI(t, pb.NewCSIPluginsClient(tc.conn(s)), &pb.NodeCSIUpdateRequest{NodeId: n.GetId(),
		Controllers: map[string]*pb.CSIPluginInfo{"hp": {Healthy: true, ControllerRequired: true, ControllerInfo: &pb.CSIControllerInfo{SupportsCreateDelete: true}}},
		Nodes:       map[string]*pb.CSIPluginInfo{"hp": {Healthy: true}, "local": {Healthy: true}},
	})
	v := fsVolume("scratch")
	v.PluginId = "local"
	resp, err := vols.Register(ctx10s(t), &pb.VolumeRegisterRequest{Volume: v})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetWarnings()) != 1 || !strings.Contains(resp.GetWarnings()[0], `"local" has no controller service`) {
		t.Errorf("warnings %q", resp.GetWarnings())
	}
	if p.ValidateVolumeCapabilities.Count() != 0 {
		t.Error("a plugin without a controller was asked to validate")
	}
	v = fsVolume("x")
	v.PluginId = "nope"
	_, err = vols.Register(ctx10s(t), &pb.VolumeRegisterRequest{Volume: v})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), `csi plugin "nope"`) || !strings.Contains(err.Error(), `volume "x"`) {
		t.Fatalf("unknown plugin: %v", err)
	}
	// The only controller unhealthy: refused, saying why.
	updateCSI(t, pb.NewCSIPluginsClient(tc.conn(s)), &pb.NodeCSIUpdateRequest{NodeId: n.GetId(),
		Controllers: map[string]*pb.CSIPluginInfo{"hp": {Healthy: false, HealthDescription: "probe: not ready", ControllerRequired: true}},
		Nodes:       map[string]*pb.CSIPluginInfo{"hp": {Healthy: true}},
	})
	_, err = vols.Register(ctx10s(t), &pb.VolumeRegisterRequest{Volume: fsVolume("y")})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "probe: not ready") || !strings.Contains(err.Error(), n.GetId()) {
		t.Fatalf("unhealthy controller: %v", err)
	}
}

// Create asks the plugin (capacity, source, topology, secrets), registers
// what it answers, and is idempotent by ID and name; Delete calls
// DeleteVolume (NotFound is success) and deregisters; a volume with claims
// is refused naming them.
func TestVolumeCreateAndDelete(t *testing.T) {
	p := csifake.New()
	tc, s, vols, n, _ := volumeCluster(t, p)
	v := fsVolume("db")
	v.ExternalId = ""
	v.RequestedCapacityMinBytes, v.RequestedCapacityMaxBytes = 1<<30, 2<<30
	v.SnapshotId = "snap-1"
	v.TopologyRequest = &pb.TopologyRequest{Required: []*pb.Topology{{Segments: map[string]string{"rack": "r1"}}}}
	v.Secrets = map[string]string{"token": "s3cr3t"}
	p.CreateVolume.Next(&csipb.CreateVolumeResponse{Volume: &csipb.Volume{VolumeId: "ext-db", CapacityBytes: 1 << 30,
		VolumeContext: map[string]string{"path": "/x"}, AccessibleTopology: []*csipb.Topology{{Segments: map[string]string{"rack": "r1"}}}}}, nil)
	resp, err := vols.Create(ctx10s(t), &pb.VolumeCreateRequest{Volume: v})
	if err != nil {
		t.Fatal(err)
	}
	asked := p.CreateVolume.Last()
	if asked.GetName() != "db" || asked.GetCapacityRange().GetRequiredBytes() != 1<<30 || asked.GetCapacityRange().GetLimitBytes() != 2<<30 ||
		asked.GetVolumeContentSource().GetSnapshot().GetSnapshotId() != "snap-1" || asked.GetSecrets()["token"] != "s3cr3t" ||
		asked.GetAccessibilityRequirements().GetRequisite()[0].GetSegments()["rack"] != "r1" {
		t.Errorf("CreateVolume asked %v", asked)
	}
	got := resp.GetVolume()
	if got.GetExternalId() != "ext-db" || got.GetCapacityBytes() != 1<<30 || got.GetContext()["path"] != "/x" || len(got.GetAccessibleTopology()) != 1 {
		t.Errorf("created %v", got)
	}
	if got.GetSecrets()["token"] != "[REDACTED]" {
		t.Errorf("the answer shows the secret: %v", got.GetSecrets())
	}
	stored, _ := s.fsm.State().VolumeByID(nil, "db")
	if stored.GetSecrets()["token"] != "s3cr3t" {
		t.Errorf("stored secret %q: secrets are stored as given", stored.GetSecrets()["token"])
	}
	// Again: idempotent, no second CreateVolume.
	again, err := vols.Create(ctx10s(t), &pb.VolumeCreateRequest{Volume: v})
	if err != nil || !again.GetUnchanged() || again.GetVolume().GetExternalId() != "ext-db" || p.CreateVolume.Count() != 1 {
		t.Fatalf("create again: %v, %v, %d creates", again, err, p.CreateVolume.Count())
	}
	other := proto.CloneOf(v)
	other.Name = "other"
	if _, err := vols.Create(ctx10s(t), &pb.VolumeCreateRequest{Volume: other}); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("another volume under the ID: %v", err)
	}

	// The node instance reports its CSI node ID, so the leader can publish
	// the claim's attachment and unpublish it again.
	updateCSI(t, pb.NewCSIPluginsClient(tc.conn(s)), &pb.NodeCSIUpdateRequest{NodeId: n.GetId(),
		Controllers: map[string]*pb.CSIPluginInfo{"hp": {Healthy: true, Provider: "hostpath.berth.dev", ProviderVersion: "1.0", ControllerRequired: true,
			ControllerInfo: &pb.CSIControllerInfo{SupportsCreateDelete: true, SupportsAttachDetach: true, SupportsCreateDeleteSnapshot: true, SupportsListSnapshots: true, SupportsExpand: true}}},
		Nodes: map[string]*pb.CSIPluginInfo{"hp": {Healthy: true, Provider: "hostpath.berth.dev", ProviderVersion: "1.0", NodeInfo: &pb.CSINodeInfo{Id: "csi-" + n.GetId()}}},
	})
	// An operator claim holds it: delete and deregister refuse, naming it.
	claim := &pb.Claim{Id: "c1", VolumeId: "db", Operator: true, NodeId: n.GetId(), Mode: pb.ClaimMode_CLAIM_MODE_WRITE,
		AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}
	if _, err := s.raftApply(ctx10s(t), fsm.OperatorClaim, &pb.OperatorClaimCommand{Claim: claim}); err != nil {
		t.Fatal(err)
	}
	_, err = vols.Delete(ctx10s(t), &pb.VolumeDeleteRequest{VolumeId: "db"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), `volume "db"`) || !strings.Contains(err.Error(), "c1") {
		t.Fatalf("delete of a claimed volume: %v", err)
	}
	_, err = vols.Deregister(ctx10s(t), &pb.VolumeDeregisterRequest{VolumeId: "db", Force: true})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "c1") {
		t.Fatalf("force deregister with a live claimant: %v", err)
	}
	if p.DeleteVolume.Count() != 0 {
		t.Fatal("a claimed volume reached DeleteVolume")
	}
	claims, err := vols.Claims(ctx10s(t), &pb.VolumeClaimsRequest{VolumeId: "db"})
	if err != nil || len(claims.GetClaims()) != 1 || claims.GetClaims()[0].GetId() != "c1" {
		t.Fatalf("claims: %v, %v", claims, err)
	}
	// The leader's unpublish is held, so the attachment stays detaching.
	releaseUnpublish := p.ControllerUnpublishVolume.Block()
	defer releaseUnpublish()
	if _, err := s.raftApply(ctx10s(t), fsm.OperatorClaimRelease, &pb.OperatorClaimReleaseCommand{ClaimId: "c1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.raftApply(ctx10s(t), fsm.ClaimUpdate, &pb.ClaimUpdateCommand{Transitions: []*pb.ClaimTransition{
		{ClaimId: "c1", State: pb.ClaimState_CLAIM_STATE_NODE_DETACHED, NodeId: n.GetId()}}}); err != nil {
		t.Fatal(err)
	}
	// The claim waits on its attachment's detach (the plugin requires
	// controller publish): still claimed, and though its claimant is
	// terminal, force is refused while the attachment is not unpublished,
	// naming its node and state.
	if _, err := vols.Delete(ctx10s(t), &pb.VolumeDeleteRequest{VolumeId: "db"}); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "node-detached") {
		t.Fatalf("delete with a node-detached claim: %v", err)
	}
	_, err = vols.Deregister(ctx10s(t), &pb.VolumeDeregisterRequest{VolumeId: "db", Force: true})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), n.GetId()) || !strings.Contains(err.Error(), "detaching") {
		t.Fatalf("force deregister while the attachment is detaching: %v", err)
	}
	// Once the leader's unpublish is done the attachment and the claim are
	// gone: the volume deregisters; created again, it deletes.
	releaseUnpublish()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if a, err := s.fsm.State().Attachment(nil, "db", n.GetId()); err != nil || a != nil {
			return fmt.Errorf("attachment db/%s: %v, %v", n.GetId(), a, err)
		}
		return nil
	})
	if p.ControllerUnpublishVolume.Count() == 0 {
		t.Fatal("the attachment left without a ControllerUnpublishVolume")
	}
	if _, err := vols.Deregister(ctx10s(t), &pb.VolumeDeregisterRequest{VolumeId: "db", Force: true}); err != nil {
		t.Fatalf("force deregister once the attachment is unpublished: %v", err)
	}
	p.CreateVolume.Next(&csipb.CreateVolumeResponse{Volume: &csipb.Volume{VolumeId: "ext-db"}}, nil)
	if _, err := vols.Create(ctx10s(t), &pb.VolumeCreateRequest{Volume: v}); err != nil {
		t.Fatal(err)
	}
	p.DeleteVolume.Next(nil, status.Error(codes.NotFound, "already gone"))
	if _, err := vols.Delete(ctx10s(t), &pb.VolumeDeleteRequest{VolumeId: "db"}); err != nil {
		t.Fatalf("delete (plugin NotFound): %v", err)
	}
	if d := p.DeleteVolume.Last(); d.GetVolumeId() != "ext-db" || d.GetSecrets()["token"] != "s3cr3t" {
		t.Errorf("DeleteVolume asked %v", d)
	}
	if _, err := vols.Get(ctx10s(t), &pb.VolumeGetRequest{VolumeId: "db"}); status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), `volume "db"`) {
		t.Fatalf("after delete: %v", err)
	}
	if _, err := vols.Delete(ctx10s(t), &pb.VolumeDeleteRequest{VolumeId: "db"}); errcode.Code(err) != codes.NotFound && status.Code(err) != codes.NotFound {
		t.Fatalf("delete of an unknown volume: %v", err)
	}
}

// A planted secret is stored and reaches the plugin, but no volume API
// answer, error or server log line (at trace level) carries it — not even
// when the plugin echoes it in an error.
func TestVolumeSecretsNeverLeaveTowardsUsers(t *testing.T) {
	const secret = "pl4nted-s3cret-value"
	p := csifake.New()
	_, s, vols, _, logs := volumeCluster(t, p)
	v := fsVolume("vault")
	v.Secrets = map[string]string{"password": secret}
	var answers []string
	record := func(m proto.Message, err error) {
		if m != nil {
			answers = append(answers, prototext.Format(m))
		}
		if err != nil {
			answers = append(answers, err.Error())
		}
	}
	p.ValidateVolumeCapabilities.Next(nil, status.Errorf(codes.PermissionDenied, "login with %s failed", secret))
	_, err := vols.Register(ctx10s(t), &pb.VolumeRegisterRequest{Volume: v})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("register with a refused secret: %v", err)
	}
	record(nil, err)
	p.ValidateVolumeCapabilities.Next(&csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeCapabilities: endpoints.CSICapabilities(v)}}, nil)
	reg, err := vols.Register(ctx10s(t), &pb.VolumeRegisterRequest{Volume: v})
	if err != nil {
		t.Fatal(err)
	}
	record(reg, nil)
	if got := p.ValidateVolumeCapabilities.Last().GetSecrets()["password"]; got != secret {
		t.Fatalf("the plugin got secret %q", got)
	}
	get, err := vols.Get(ctx10s(t), &pb.VolumeGetRequest{VolumeId: "vault"})
	record(get, err)
	list, err := vols.List(ctx10s(t), &pb.VolumeListRequest{})
	record(list, err)
	claims, err := vols.Claims(ctx10s(t), &pb.VolumeClaimsRequest{VolumeId: "vault"})
	record(claims, err)
	p.CreateSnapshot.Next(&csipb.CreateSnapshotResponse{Snapshot: &csipb.Snapshot{SnapshotId: "snap", SourceVolumeId: "ext-vault", ReadyToUse: true}}, nil)
	snap, err := vols.CreateSnapshot(ctx10s(t), &pb.SnapshotCreateRequest{VolumeId: "vault", Name: "nightly"})
	record(snap, err)
	if err != nil || snap.GetSnapshot().GetVolumeId() != "vault" || p.CreateSnapshot.Last().GetSecrets()["password"] != secret {
		t.Fatalf("snapshot: %v, %v (the plugin got %v)", snap, err, p.CreateSnapshot.Last())
	}
	p.ControllerExpandVolume.Next(nil, status.Errorf(codes.OutOfRange, "%s cannot grow", secret))
	exp, err := vols.Expand(ctx10s(t), &pb.VolumeExpandRequest{VolumeId: "vault", CapacityMinBytes: 10})
	record(exp, err)
	if status.Code(err) != codes.OutOfRange {
		t.Fatalf("expand: %v", err)
	}
	if stored, _ := s.fsm.State().VolumeByID(nil, "vault"); stored.GetSecrets()["password"] != secret {
		t.Fatalf("a read changed the stored secret: %v", stored.GetSecrets())
	}
	if get.GetVolume().GetVolume().GetSecrets()["password"] != "[REDACTED]" {
		t.Errorf("get shows secrets %v; want the key with its value redacted", get.GetVolume().GetVolume().GetSecrets())
	}
	for _, a := range answers {
		if strings.Contains(a, secret) {
			t.Errorf("an answer carries the secret: %s", a)
		}
	}
	if strings.Contains(logs.String(), secret) {
		t.Errorf("the server log carries the secret")
	}
	if !strings.Contains(logs.String(), "vault") {
		t.Errorf("the server log (trace) never mentions the volume: is it captured?")
	}
}
