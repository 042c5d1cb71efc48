package cli

import (
	"testing"

	"berth.dev/berth/rpc/pb"
)

// TestNodeStatusShowsHostVolumes: one node's view lists its host volumes
// (name, read-only, path) and -json carries them as the API's fields.
func TestNodeStatusShowsHostVolumes(t *testing.T) {
	f := newFakeCluster(t)
	f.nodes[nodeA] = &pb.Node{Id: nodeA, Name: "client-1", Status: pb.NodeStatus_NODE_STATUS_READY,
		HostVolumes: map[string]*pb.HostVolumeInfo{
			"logs":    {Path: "/var/log/apps", ReadOnly: true},
			"scratch": {Path: "/srv/scratch"},
		}}
	wantOut(t, []string{"node", "status", "-address", f.url, "n1"}, 0,
		"\nHost Volumes\nName     Read Only  Path\nlogs     true       /var/log/apps\nscratch  false      /srv/scratch\n")
	wantOut(t, []string{"node", "status", "-address", f.url, "-json", "n1"}, 0,
		`"host_volumes": {`, `"path": "/srv/scratch"`, `"read_only": true`)
}
