package client

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// The node's host volumes reach the servers with its registration.
func TestClientRegistersItsHostVolumes(t *testing.T) {
	s := startServer(t)
	vols := map[string]*pb.HostVolumeInfo{"scratch": {Path: "/srv/scratch"}, "logs": {Path: "/var/log/apps", ReadOnly: true}}
	c, err := New(Config{
		DataDir:     t.TempDir(),
		Servers:     []string{serverRPC(t, s)},
		Logger:      testutil.Logger(t).Named("client"),
		HostVolumes: vols,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	n := waitStatus(t, s, c.NodeID(), pb.NodeStatus_NODE_STATUS_READY)
	if len(n.GetHostVolumes()) != len(vols) {
		t.Fatalf("registered host volumes %v, want %v", n.GetHostVolumes(), vols)
	}
	for name, want := range vols {
		if !proto.Equal(n.GetHostVolumes()[name], want) {
			t.Errorf("host volume %q = %v, want %v", name, n.GetHostVolumes()[name], want)
		}
	}
}

// A dynamic host volume wins over a static one of its name (Nomad's
// rule); the others are kept.
func TestDynamicHostVolumeWinsOverStatic(t *testing.T) {
	got := mergeHostVolumes(
		map[string]*pb.HostVolumeInfo{"data": {Path: "/srv/static"}, "logs": {Path: "/var/log"}},
		map[string]*pb.HostVolumeInfo{"data": {Path: "/vols/hv1", Id: "hv1"}})
	if got["data"].GetId() != "hv1" || got["data"].GetPath() != "/vols/hv1" || got["logs"].GetPath() != "/var/log" || len(got) != 2 {
		t.Fatalf("merged %v", got)
	}
	if mergeHostVolumes(nil, nil) != nil {
		t.Error("no volumes should be nil")
	}
}
