package storagetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	hclog "github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/sdk/internal/testenv"
)

// Harness describes the storage adapter under test.
type Harness struct {
	// Name is the adapter's name: what it must answer in the storage API
	// negotiation (berth refuses an adapter whose name is not its catalog
	// name). Required.
	Name string
	// Command returns a new command starting the adapter, for each adapter
	// process the harness launches. Nil: this test binary (TestMain must
	// call ServeIfAdapter). The harness adds the environment berth gives
	// an adapter (sdk.StorageAdapterEnv) to the command's.
	Command func() *exec.Cmd
	// Config is the adapter's plugin block config, a JSON object; default
	// {}.
	Config json.RawMessage
	// Volume says which volume the lifecycle checks take through their
	// steps.
	Volume Volume
	// NodeNeedsRoot says why the adapter's node service needs root (it
	// mounts, say). When set and the test does not run as root, the checks
	// that stage and publish skip, or fail under CI=true: a conformance
	// run that did not run must not read as a pass.
	NodeNeedsRoot string
	// Timeout bounds each call and each wait (the adapter ready, a process
	// gone); default 60s. Checks assert outcomes, never speed.
	Timeout time.Duration
}

// Volume is the volume the lifecycle checks use.
type Volume struct {
	// Capability is how the volume is staged and published; default mount
	// access (no fs_type) in SINGLE_NODE_WRITER mode.
	Capability *csipb.VolumeCapability
	// CapacityBytes is CreateVolume's required_bytes; 0 leaves the range
	// unset.
	CapacityBytes int64
	// Parameters are CreateVolume's parameters.
	Parameters map[string]string
	// ExistingID names a volume the adapter can stage and publish without
	// creating it, as an operator registers one with berth. Required for
	// the node lifecycle of an adapter without CREATE_DELETE_VOLUME;
	// ignored otherwise.
	ExistingID string
	// ExistingContext is ExistingID's volume context.
	ExistingContext map[string]string
}

// defaultTimeout is Harness.Timeout's default.
const defaultTimeout = 60 * time.Second

// NodeID and NodeName are what the harness tells the adapter about its
// node (sdk.EnvStorageNodeID, sdk.EnvStorageNodeName).
const (
	NodeID   = "storagetest-node-id"
	NodeName = "storagetest-node"
)

// Run launches the adapter as berth does and runs every check against it
// as subtests.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.Name == "" {
		t.Fatal("storagetest: Harness.Name is required")
	}
	if h.Timeout <= 0 {
		h.Timeout = defaultTimeout
	}
	if len(h.Config) == 0 {
		h.Config = json.RawMessage("{}")
	}
	if h.Volume.Capability == nil {
		h.Volume.Capability = MountCapability(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	}
	s := &suite{h: h, top: t, dataDir: t.TempDir(), logger: Logger(t)}
	p, err := s.launch()
	if err != nil {
		t.Fatal(err)
	}
	s.use(p)
	for _, c := range checks {
		if !t.Run(c.name, func(t *testing.T) { c.run(t, s) }) && c.essential {
			t.Fatalf("storagetest: check %s failed; the checks after it rely on it", c.name)
		}
	}
}

// MountCapability is mount access, no fs_type, in mode.
func MountCapability(mode csipb.VolumeCapability_AccessMode_Mode) *csipb.VolumeCapability {
	return &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: mode},
	}
}

type check struct {
	name string
	run  func(t *testing.T, s *suite)
	// essential: the later checks cannot run without it.
	essential bool
}

// checks, in the order they run; each lives in the file of its topic.
var checks = []check{
	{"Negotiation", checkNegotiation, true},
	{"PluginInfo", checkPluginInfo, false},
	{"ProbeReady", checkProbeReady, true},
	{"Capabilities", checkCapabilities, true},
	{"AdvertisedCallsServed", checkAdvertisedCalls, false},
	{"MissingFieldsInvalidArgument", checkMissingFields, false},
	{"UnknownVolumeNotFound", checkUnknownVolume, false},
	{"ControllerLifecycle", checkControllerLifecycle, false},
	{"NodeLifecycle", checkNodeLifecycle, false},
	{"RestartKeepsVolumes", checkRestart, false},
	{"RefusesToRunOutsideBerth", checkOutsideBerth, false},
	{"CleanShutdown", checkShutdown, false},
}

// suite is the state the checks share: one adapter process for most.
type suite struct {
	h Harness
	// top is Run's test: adapter processes live until it ends.
	top     *testing.T
	logger  hclog.Logger
	dataDir string
	proc    *process
	conn    *grpc.ClientConn
	id      csipb.IdentityClient
	ctl     csipb.ControllerClient
	node    csipb.NodeClient
	seq     atomic.Int64

	// Filled in by Capabilities.
	plugin     map[csipb.PluginCapability_Service_Type]bool
	controller map[csipb.ControllerServiceCapability_RPC_Type]bool // nil: no controller
	nodeCaps   map[csipb.NodeServiceCapability_RPC_Type]bool       // nil: no node service
	nodeID     string
}

func (s *suite) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.h.Timeout)
}

func (s *suite) hasController(c csipb.ControllerServiceCapability_RPC_Type) bool {
	return s.controller[c]
}

func (s *suite) hasNode(c csipb.NodeServiceCapability_RPC_Type) bool { return s.nodeCaps[c] }

// creates reports whether the adapter creates its volumes.
func (s *suite) creates() bool {
	return s.hasController(csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME)
}

// attaches reports whether berth calls ControllerPublishVolume before a
// node stages the adapter's volumes (csi.Fingerprint.ControllerRequired).
func (s *suite) attaches() bool {
	return s.hasController(csipb.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME)
}

func (s *suite) stages() bool { return s.hasNode(csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME) }

// name returns a fresh volume name.
func (s *suite) name(what string) string {
	return fmt.Sprintf("storagetest-%s-%d-%d", what, os.Getpid(), s.seq.Add(1))
}

// requireNodeRoot ends t when the node service needs root and the test is
// not root (see Harness.NodeNeedsRoot).
func (s *suite) requireNodeRoot(t *testing.T) {
	t.Helper()
	if s.h.NodeNeedsRoot != "" && os.Geteuid() != 0 {
		testenv.Unavailable(t, "needs root: adapter %q: %s (run the tests as root)", s.h.Name, s.h.NodeNeedsRoot)
	}
}

// wantCode fails unless err has gRPC code want.
func wantCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Errorf("%s: got %v (code %s), want code %s", what, err, got, want)
	}
}

// wantUndone fails unless err is nil or NotFound: what berth takes as
// success of an unpublish, unstage or delete (csi: NotFound on a teardown
// call means there is nothing left to undo).
func wantUndone(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil && status.Code(err) != codes.NotFound {
		t.Errorf("%s: %v, want OK (or NotFound)", what, err)
	}
}

var errNotReady = errors.New("the plugin says it is not ready")

// publishNode is the node ID ControllerPublishVolume is given: the node
// service's, as berth gives it, or the harness's for a controller alone.
func (s *suite) publishNode() string {
	if s.nodeID != "" {
		return s.nodeID
	}
	return NodeID
}
