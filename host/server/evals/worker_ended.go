package evals

import (
	"fmt"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// endedMeanwhile reports whether eval's row in snap (a state at index
// latest) is gone or terminal, and then the index to ack it with: the
// row's modify index, or latest for a row gone. Such an evaluation is not
// planned. A blocked evaluation woken in memory (Broker.wake) keeps its
// row blocked while it waits behind its job's outstanding evaluation, and
// that evaluation's run cancels it (olderBlocked: it decided what the
// blocked one waited for); planning the woken copy afterwards would waste
// a scheduler pass and write its outcome over the cancellation (the state
// machine keeps a terminal row as it is, fsm.keepTerminalEval, but the
// plan's allocations would still be proposed). A row collected by the
// garbage collector meanwhile is not brought back either.
func endedMeanwhile(snap *fsm.StateSnapshot, eval *pb.Evaluation, latest uint64) (uint64, bool, error) {
	row, err := snap.EvalByID(nil, eval.GetId())
	if err != nil {
		return 0, false, fmt.Errorf("reading evaluation %s: %w", eval.GetId(), err)
	}
	if row == nil {
		return latest, true, nil
	}
	if fsm.EvalTerminal(row) {
		return row.GetModifyIndex(), true, nil
	}
	return 0, false, nil
}
