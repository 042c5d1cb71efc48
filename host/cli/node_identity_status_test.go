package cli

import (
	"testing"

	"berth.dev/berth/rpc/pb"
)

// node status says whether the node's calls are authenticated by a
// secret (the servers' has_secret), and what to do when they are not.
func TestNodeStatusShowsIdentity(t *testing.T) {
	f := newFakeCluster(t)
	f.nodes[nodeA] = &pb.Node{Id: nodeA, Name: "client-1", Status: pb.NodeStatus_NODE_STATUS_READY, HasSecret: true}
	f.nodes[nodeB] = &pb.Node{Id: nodeB, Name: "client-2", Status: pb.NodeStatus_NODE_STATUS_READY}
	wantOut(t, []string{"node", "status", "-address", f.url, "n1"}, 0, "Identity            = secret\n")
	wantOut(t, []string{"node", "status", "-address", f.url, "n2"}, 0,
		"Identity            = none (calls for it are not authenticated; run its client at 0.1.0-dev.4 or later")
	f.mu.Lock()
	f.nodes[nodeB].Readmitted = true
	f.mu.Unlock()
	wantOut(t, []string{"node", "status", "-address", f.url, "n2"}, 0,
		"Identity            = none (re-admitted: its next registration sets its secret)\n")
	wantOut(t, []string{"node", "status", "-address", f.url, "-json", "n1"}, 0, `"has_secret": true`)
	wantOut(t, []string{"node", "status", "-address", f.url, "-json", "n2"}, 0, `"has_secret": false`)
}
