package server

import "runtime"

// schedulersPerCore is how many scheduler workers the leader runs per CPU
// core unless Config.NumSchedulers says otherwise. A worker holds its
// evaluation for the whole of its plan's raft round trip — the commit, an
// fsync on the leader and on a follower, tens of milliseconds on a busy
// disk — against a few milliseconds of planning, so one worker per core
// left the cores idle and capped placements at workers ÷ commit latency:
// 1,000 jobs registered at once took 44 s to plan at 2 workers, each plan
// waiting ~100 ms for its commit (bench/nodesim -volume-jobs 1000). Plans
// of different jobs in raft together cost nothing extra: raft writes them
// in one batch, and the state machine re-checks every node and claim of
// each at apply, so two workers planning from one snapshot never both get
// a node's last room or a single-writer volume's one write claim (the
// loser plans again from the newer state).
const schedulersPerCore = 8

// defaultNumSchedulers is the leader's scheduler workers by default.
func defaultNumSchedulers() int { return max(runtime.NumCPU(), 2) * schedulersPerCore }
