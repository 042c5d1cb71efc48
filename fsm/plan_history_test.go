package fsm_test

import (
	"errors"
	"testing"

	"berth.dev/berth/fsm"
)

// A plan proposed with refuse_unseen_history and made from a state above
// the store's latest index (before a snapshot restore replaced it) is
// refused whole; one made from this store's history applies; without the
// flag (proposed while some server is older) the older rule applies it.
func TestPlanFromUnseenHistoryIsRefused(t *testing.T) {
	f := jobsFixture(t) // latest index 4
	unseen := planCmd("e2", alloc("b1", "n2", 100))
	unseen.Plan.SnapshotIndex = 9
	unseen.RefuseUnseenHistory = true
	res := applyAt(f, 5, mustEncode(t, fsm.PlanApply, unseen))
	if !errors.Is(res.Err, fsm.ErrPlanUnseenHistory) {
		t.Fatalf("plan made at index 9 on a store at 4: %v, want ErrPlanUnseenHistory", res.Err)
	}
	if a, _ := f.State().AllocByID(nil, "b1"); a != nil {
		t.Fatalf("the refused plan placed b1: %v", a)
	}

	seen := planCmd("e2", alloc("b1", "n2", 100))
	seen.Plan.SnapshotIndex = 4
	seen.RefuseUnseenHistory = true
	applyOK(t, f, 6, fsm.PlanApply, seen)
	if a, _ := f.State().AllocByID(nil, "b1"); a == nil {
		t.Fatal("a plan made from the store's own latest state was not applied")
	}

	legacy := planCmd("e3", alloc("c1", "n2", 100))
	legacy.Plan.SnapshotIndex = 99
	applyOK(t, f, 7, fsm.PlanApply, legacy)
	if a, _ := f.State().AllocByID(nil, "c1"); a == nil {
		t.Fatal("a plan proposed without refuse_unseen_history was refused")
	}
}
