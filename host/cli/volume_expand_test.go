package cli

import (
	"strings"
	"testing"

	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
)

// TestVolumeExpandShowsEachNode: after a node expansion the table has one
// row per node, with its capacity or its error; a failed node makes the
// command exit 1 naming the volume and the capacity still recorded, and
// -json prints the servers' answer whole.
func TestVolumeExpandShowsEachNode(t *testing.T) {
	f := newFakeCluster(t)
	f.volumes["data"] = failingView()
	f.expandResp = &pb.VolumeExpandResponse{CapacityBytes: 20 << 30, NodeExpansionRequired: true, RecordedCapacityBytes: 20 << 30,
		Nodes: []*pb.VolumeNodeExpansion{{NodeId: "node-a", CapacityBytes: 20 << 30}, {NodeId: "node-b", CapacityBytes: 20 << 30}}}
	out := wantOut(t, []string{"volume", "expand", "-address", f.url, "-capacity-min", "20GiB", "data"}, 0)
	want := `Volume "data" expanded to 20.0 GiB by its plugin
Node expansion (NodeExpandVolume):
Node ID  Capacity  Result
node-a   20.0 GiB  expanded
node-b   20.0 GiB  expanded
Recorded capacity: 20.0 GiB
`
	if out != want {
		t.Fatalf("expand printed:\n%s\nwant:\n%s", out, want)
	}

	f.expandResp = &pb.VolumeExpandResponse{CapacityBytes: 20 << 30, NodeExpansionRequired: true, RecordedCapacityBytes: 10 << 30,
		NodeExpansionPendingBytes: 20 << 30, Nodes: []*pb.VolumeNodeExpansion{{NodeId: "node-a", CapacityBytes: 20 << 30},
			{NodeId: "node-b", Error: `node expansion of volume "data" (csi plugin "hp") on node node-b: resize2fs failed`}}}
	out, errOut := wantOutErr(t, []string{"volume", "expand", "-address", f.url, "-capacity-min", "20GiB", "data"}, 1)
	if !strings.Contains(out, "node-a   20.0 GiB  expanded\n") ||
		!strings.Contains(out, `node-b   -         error: node expansion of volume "data" (csi plugin "hp") on node node-b: resize2fs failed`) ||
		!strings.Contains(out, "Recorded capacity: 10.0 GiB\nNode expansion to 20.0 GiB pending: made by the next node that stages or publishes the volume\n") {
		t.Fatalf("expand with a failed node printed:\n%s", out)
	}
	if !strings.Contains(errOut, `volume "data": node expansion failed on 1 of 2 nodes; its recorded capacity stays 10.0 GiB`) {
		t.Fatalf("expand with a failed node: stderr %q", errOut)
	}

	// A node that no longer holds the volume: "not held", not a failure.
	f.expandResp = &pb.VolumeExpandResponse{CapacityBytes: 20 << 30, NodeExpansionRequired: true, RecordedCapacityBytes: 20 << 30,
		Nodes: []*pb.VolumeNodeExpansion{{NodeId: "node-a", CapacityBytes: 20 << 30}, {NodeId: "node-b", NotHeld: true}}}
	out = wantOut(t, []string{"volume", "expand", "-address", f.url, "-capacity-min", "20GiB", "data"}, 0)
	if !strings.Contains(out, "node-a   20.0 GiB  expanded\nnode-b   -         not held\n") {
		t.Fatalf("expand with a node not holding the volume printed:\n%s", out)
	}

	f.expandResp = &pb.VolumeExpandResponse{CapacityBytes: 20 << 30, NodeExpansionRequired: true, RecordedCapacityBytes: 10 << 30,
		NodeExpansionPendingBytes: 20 << 30, Nodes: []*pb.VolumeNodeExpansion{{NodeId: "node-a", CapacityBytes: 20 << 30},
			{NodeId: "node-b", Error: "resize2fs failed"}}}
	out, _ = wantOutErr(t, []string{"volume", "expand", "-address", f.url, "-capacity-min", "20GiB", "-json", "data"}, 1)
	got := &pb.VolumeExpandResponse{}
	if err := apijson.Unmarshal([]byte(out), got); err != nil || len(got.GetNodes()) != 2 || got.GetNodes()[1].GetError() == "" ||
		got.GetRecordedCapacityBytes() != 10<<30 {
		t.Fatalf("-json printed %s (%v)", out, err)
	}
}
