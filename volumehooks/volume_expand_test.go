package volumehooks

import (
	"path/filepath"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/rpc/pb"
)

// A volume with a node expansion pending (volume expand found no node
// holding it) is expanded once staged and published for the alloc: the
// plugin gets NodeExpandVolume with the alloc's target, the staging path
// and the pending size; the in-use report carries the size and a task
// event says so. A volume with none pending is not expanded.
func TestPrerunMakesAPendingNodeExpansion(t *testing.T) {
	e := newVolEnv(t, nil)
	e.plugins.expand = true
	resp := claimResp(pb.ClaimState_CLAIM_STATE_READY)
	resp.Volume.NodeExpansionPendingBytes = 20 << 20
	e.claims.set(hookAlloc, resp)
	if err := e.prerun(false); err != nil {
		t.Fatal(err)
	}
	if n := e.plugin.NodeExpandVolume.Count(); n != 1 {
		t.Fatalf("%d NodeExpandVolume calls, want 1", n)
	}
	got := e.plugin.NodeExpandVolume.Last()
	target := filepath.Join(e.dir, "csi", "volumes", "hostpath", "publish", hookAlloc, volID)
	staging := filepath.Join(e.dir, "csi", "volumes", "hostpath", "staging", volID)
	if got.GetVolumeId() != "ext-1" || got.GetVolumePath() != target || got.GetStagingTargetPath() != staging ||
		got.GetCapacityRange().GetRequiredBytes() != 20<<20 || got.GetSecrets()["k"] != "s" ||
		got.GetVolumeCapability().GetAccessMode().GetMode() != csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER {
		t.Fatalf("NodeExpandVolume got %v", got)
	}
	up := e.claims.waitUpdate(t, hookAlloc, volID, pb.ClaimState_CLAIM_STATE_IN_USE, false)
	if up.GetNodeExpandedBytes() != 20<<20 {
		t.Fatalf("in-use report carries node_expanded_bytes %d, want %d", up.GetNodeExpandedBytes(), 20<<20)
	}
	if ev := e.events.ofType(EventVolumeExpanded); len(ev) != 1 || !strings.Contains(ev[0].GetMessage(), "20971520 bytes") {
		t.Fatalf("expanded events %v", ev)
	}
	wantEventOrder(t, e.events, EventVolumeStaged, EventVolumePublished, EventVolumeExpanded)
}

// No pending expansion: no call, nothing in the report. A node plugin
// without EXPAND_VOLUME leaves a pending one pending.
func TestPrerunExpandsOnlyWhatIsPendingAndPossible(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pending int64
		expand  bool
	}{{"none pending", 0, true}, {"plugin cannot", 20 << 20, false}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newVolEnv(t, nil)
			e.plugins.expand = tc.expand
			resp := claimResp(pb.ClaimState_CLAIM_STATE_READY)
			resp.Volume.NodeExpansionPendingBytes = tc.pending
			e.claims.set(hookAlloc, resp)
			if err := e.prerun(false); err != nil {
				t.Fatal(err)
			}
			if n := e.plugin.NodeExpandVolume.Count(); n != 0 {
				t.Fatalf("%d NodeExpandVolume calls, want none", n)
			}
			if up := e.claims.waitUpdate(t, hookAlloc, volID, pb.ClaimState_CLAIM_STATE_IN_USE, false); up.GetNodeExpandedBytes() != 0 {
				t.Fatalf("in-use report carries node_expanded_bytes %d", up.GetNodeExpandedBytes())
			}
		})
	}
}

// The plugin's failure to expand fails the prerun as a failed publish
// does: shown on the claim and as a task event, naming volume, alloc and
// node.
func TestPrerunPendingExpansionFailureIsShown(t *testing.T) {
	e := newVolEnv(t, nil)
	e.plugins.expand = true
	e.plugin.NodeExpandVolume.Always(nil, status.Error(codes.Internal, "grow failed: no room"))
	resp := claimResp(pb.ClaimState_CLAIM_STATE_READY)
	resp.Volume.NodeExpansionPendingBytes = 20 << 20
	e.claims.set(hookAlloc, resp)
	err := e.prerun(false)
	if err == nil || !strings.Contains(err.Error(), "no room") || !strings.Contains(err.Error(), hookAlloc) || !strings.Contains(err.Error(), volID) {
		t.Fatalf("prerun: %v", err)
	}
	up := e.claims.waitUpdate(t, hookAlloc, volID, pb.ClaimState_CLAIM_STATE_READY, true)
	if !strings.Contains(up.GetError().GetMessage(), "no room") {
		t.Fatalf("claim error %v", up.GetError())
	}
	if ev := e.events.ofType(EventVolumeFailure); len(ev) != 1 || !strings.Contains(ev[0].GetMessage(), "no room") {
		t.Fatalf("failure events %v", ev)
	}
}

// A client restarting before its in-use report with node_expanded_bytes
// was delivered queues the in-use report again for the recovered alloc:
// the undelivered one, with the size, is kept and delivered.
func TestRequeuedInUseKeepsTheNodeExpansion(t *testing.T) {
	e := newVolEnv(t, nil)
	e.plugins.expand = true
	resp := claimResp(pb.ClaimState_CLAIM_STATE_READY)
	resp.Volume.NodeExpansionPendingBytes = 20 << 20
	e.claims.set(hookAlloc, resp)
	e.claims.fail(nil, status.Error(codes.Unavailable, "no leader"))
	if err := e.prerun(false); err != nil {
		t.Fatal(err)
	}
	e.restart()
	if err := e.prerun(true); err != nil {
		t.Fatal(err)
	}
	e.claims.fail(nil, nil)
	if up := e.claims.waitUpdate(t, hookAlloc, volID, pb.ClaimState_CLAIM_STATE_IN_USE, false); up.GetNodeExpandedBytes() != 20<<20 {
		t.Fatalf("in-use report delivered after the restart carries node_expanded_bytes %d, want %d", up.GetNodeExpandedBytes(), 20<<20)
	}
	if n := e.plugin.NodeExpandVolume.Count(); n != 1 {
		t.Fatalf("%d NodeExpandVolume calls, want 1", n)
	}
}
