package fsm_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// An in-place update stores the scheduler's copy of the alloc,
// read before an `alloc stop` (AllocDesiredTransition) applied; the
// migrate mark the stop set is overwritten, so the stop's eval finds
// nothing to do.
func TestInPlaceUpdateKeepsADesiredTransitionSetMeanwhile(t *testing.T) {
	f := jobsFixture(t)
	// The scheduler reads a1 (at index 4) for an in-place update.
	stale, err := f.State().AllocByID(nil, "a1")
	if err != nil || stale == nil {
		t.Fatal(err)
	}
	stale = proto.Clone(stale).(*pb.Allocation)
	// alloc stop a1 applies first.
	applyOK(t, f, 5, fsm.AllocDesiredTransition, &pb.AllocDesiredTransitionCommand{
		Allocs: map[string]*pb.DesiredTransition{"a1": {Migrate: true}},
		Evals:  []*pb.Evaluation{{Id: "e-stop", JobId: "web", Status: pb.EvalStatus_EVAL_STATUS_PENDING}}})
	// Then the in-place update plan.
	stale.EvalId = "e1"
	applyOK(t, f, 6, fsm.PlanApply, planCmd("e1", stale))
	got, _ := f.State().AllocByID(nil, "a1")
	if !got.GetDesiredTransition().GetMigrate() {
		t.Fatalf("a1 lost the migrate mark of the alloc stop applied at 5: %v", got.GetDesiredTransition())
	}
}
