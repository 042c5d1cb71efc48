package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"berth.dev/berth/rpc/pb"
)

// The restore section's state holds what it says: its nodes, its job's
// allocs all running, and a ready write claim per claimed volume.
func TestRestoreStateHoldsItsObjects(t *testing.T) {
	st := restoreState{nodes: 30, allocs: 120, claims: 12}
	built, err := st.build()
	if err != nil {
		t.Fatal(err)
	}
	f, err := restoreFSM(built.snapshot)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := f.State().Nodes(nil)
	if err != nil || len(nodes) != st.nodes {
		t.Fatalf("%d nodes (%v), want %d", len(nodes), err, st.nodes)
	}
	for _, n := range nodes {
		if len(n.GetCsiNodePlugins()) != 1 {
			t.Fatalf("node %s serves %d CSI node plugins, want 1", n.GetId(), len(n.GetCsiNodePlugins()))
		}
	}
	allocs, err := f.State().AllocsByJob(nil, "sim-job")
	if err != nil || len(allocs) != st.allocs {
		t.Fatalf("%d allocs (%v), want %d", len(allocs), err, st.allocs)
	}
	for _, a := range allocs {
		if a.GetClientStatus() != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING {
			t.Fatalf("alloc %s is %s, want running", a.GetId(), a.GetClientStatus())
		}
	}
	for v := range st.claims {
		claims, err := f.State().ClaimsByVolume(nil, fmt.Sprintf("vol-%05d", v))
		if err != nil || len(claims) != 1 || claims[0].GetMode() != pb.ClaimMode_CLAIM_MODE_WRITE {
			t.Fatalf("volume %d's claims: %v (%v), want one write claim", v, claims, err)
		}
	}
}

// TestRestoreSectionSmoke runs the restore section's quick plan end to end
// on three real servers (the berth binary of this tree, built here unless
// BERTH_BIN names one) and checks what it measured, not how fast: every
// restore answered, the leader's log gave its parts, and no process is
// left.
func TestRestoreSectionSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three servers")
	}
	bin := filepath.Join(t.TempDir(), "berth")
	if from := os.Getenv("BERTH_BIN"); from != "" {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, b, 0o755); err != nil {
			t.Fatal(err)
		}
	} else {
		cmd := exec.Command("go", "build", "-o", bin, "berth.dev/berth")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building berth: %v\n%s", err, out)
		}
	}
	plan := quickRestorePlan
	built, err := plan.state.build()
	if err != nil {
		t.Fatal(err)
	}
	archive, err := restoreArchive(built)
	if err != nil {
		t.Fatal(err)
	}
	reps, err := measureRestore([]volMoveBin{{"new", bin}}, archive, plan)
	if err != nil {
		t.Fatal(err)
	}
	if left := processesOf(t, bin); len(left) > 0 {
		t.Errorf("processes of %s left running after the section: %v", bin, left)
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if len(reps) != 1 || len(reps[0].runs) != plan.n {
		t.Fatalf("reports %+v, want one of %d runs", reps, plan.n)
	}
	for i, r := range reps[0].runs {
		if r.total <= 0 || r.check <= 0 || r.raft <= 0 {
			t.Fatalf("run %d: %+v, want the total and the leader's logged check and raft parts", i+1, r)
		}
	}
}
