package volumemanager

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/csi"
	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// waitLimit bounds every wait for a condition: a bound on a hang, not a
// timing assumption.
const waitLimit = 10 * time.Second

const nodeID = "5e0c8f5e-0000-4000-8000-000000000001"

// memStore is the state DB's volume usage in memory, shared by the
// managers of one test the way a state DB outlives a client restart.
type memStore struct {
	mu   sync.Mutex
	recs map[string]*pb.VolumeUsageRecord
	puts int
	// full, when set, is what every write fails with (a full disk).
	full error
}

// setFull makes the writes fail with err (nil: they succeed again).
func (s *memStore) setFull(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.full = err
}

var _ Store = (*memStore)(nil)

func newMemStore() *memStore { return &memStore{recs: map[string]*pb.VolumeUsageRecord{}} }

func (s *memStore) PutVolumeUsage(rec *pb.VolumeUsageRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.full != nil {
		return s.full
	}
	s.recs[rec.GetVolumeId()] = proto.CloneOf(rec)
	s.puts++
	return nil
}

func (s *memStore) DeleteVolumeUsage(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.full != nil {
		return s.full
	}
	delete(s.recs, id)
	return nil
}

func (s *memStore) VolumeUsages() ([]*pb.VolumeUsageRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*pb.VolumeUsageRecord
	for _, r := range s.recs {
		out = append(out, proto.CloneOf(r))
	}
	return out, nil
}

func (s *memStore) get(id string) *pb.VolumeUsageRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.recs[id]; ok {
		return proto.CloneOf(r)
	}
	return nil
}

// fakePlugins hands out one csifake plugin as the node instance of every
// plugin ID.
type fakePlugins struct {
	client   *csi.Client
	stage    bool
	stageDir string
	// expand is the node service's EXPAND_VOLUME (expand_test.go).
	expand  bool
	lookups int
	mu      sync.Mutex
}

func (f *fakePlugins) WaitNode(context.Context, string) (Plugin, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lookups++
	return Plugin{Node: f.client.Node, StageUnstage: f.stage, StagePublishDir: f.stageDir, Expand: f.expand}, nil
}

// instantClock records the backoff waits and returns at once.
type instantClock struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (c *instantClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.waits = append(c.waits, d)
	c.mu.Unlock()
	return ctx.Err()
}

type harness struct {
	dir     string
	plugin  *csifake.Plugin
	plugins *fakePlugins
	store   *memStore
	clock   *instantClock
}

// newHarness serves a fake plugin with STAGE_UNSTAGE on a unix socket.
func newHarness(t *testing.T) *harness {
	t.Helper()
	sockDir, err := os.MkdirTemp("", "vm")
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
	return &harness{dir: t.TempDir(), plugin: p, plugins: &fakePlugins{client: c, stage: true}, store: newMemStore(), clock: &instantClock{}}
}

// manager starts a manager on the harness's store: a second call is a
// client restart.
func (h *harness) manager(t *testing.T) *Manager {
	t.Helper()
	m, err := New(Config{DataDir: h.dir, NodeID: nodeID, Store: h.store, Plugins: h.plugins, Logger: testutil.Logger(t),
		Retry: csi.Retry{Initial: time.Millisecond, Max: 4 * time.Millisecond, Multiplier: 2, Clock: h.clock}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func volume(id string) *pb.Volume {
	return &pb.Volume{Id: id, PluginId: "hostpath", ExternalId: "ext-" + id, Secrets: map[string]string{"key": "s3cret"},
		Context:      map[string]string{"ctx": "1"},
		MountOptions: &pb.MountOptions{FsType: "ext4", MountFlags: []string{"noatime"}}}
}

func request(vol, user string) PublishRequest {
	return PublishRequest{Volume: volume(vol), User: user,
		AccessMode:     pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_MULTI_WRITER,
		AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM,
		PublishContext: map[string]string{"device": "/dev/fake"}}
}
