package fsm

import "berth.dev/berth/rpc/pb"

// keepTerminalEval reports whether upsertEvals must leave existing as it
// is rather than store e: existing is terminal (complete, failed,
// canceled) and e would change its status. A terminal evaluation is final:
// a worker that planned a copy of it taken before it ended (a blocked
// evaluation woken in memory, cancelled meanwhile by its job's other
// evaluation, host/server/evals) must not turn "canceled" back into
// "blocked" or "complete". The rule changes what an apply stores, so it
// holds only while every server in the servers table has recorded
// 0.1.0-dev.4 or later, the gate of claimStateSince (stateSinceOn: read
// from the replicated state, so every server decides alike); an older
// server would store the upsert.
func keepTerminalEval(tx *writeTxn, existing, e *pb.Evaluation) (bool, error) {
	if existing == nil || !EvalTerminal(existing) || existing.GetStatus() == e.GetStatus() {
		return false, nil
	}
	return stateSinceOn(tx)
}
