// Package scheduler decides where allocations run. It is pure: a state
// snapshot and an evaluation in, a plan out. It reads no clock (the time
// comes in Options.Now), makes no IDs of its own (Options.NewID), does no
// I/O, and for the same inputs returns the same plan, so a worker can
// retry an evaluation from a fresh snapshot and tests can pin every
// decision.
//
// The server calls Schedule with its snapshot adapted to State:
//
//	res, err := scheduler.Schedule(snap, eval, scheduler.Options{Now: now, NewID: uuid.Generate})
//
// and submits res.Plan as one raft command, stores res.Eval (complete,
// with failed_tg_allocs, queued_allocations and plan_annotations) and
// res.FollowUps: delayed reschedule evals (pending with wait_until), a
// blocked eval when some placements found no node (a blocked eval run
// again that still fails is returned blocked itself), and a rolling-update
// eval when max_parallel held destructive updates back.
//
// Service and batch jobs are reconciled index by index: each group keeps
// count allocs named "<job>.<group>[<index>]". Extra allocs are stopped,
// highest index first; missing indexes are placed; allocs on down nodes are
// marked lost and replaced; allocs whose desired_transition asks to
// migrate are stopped and replaced elsewhere (no_replace: stopped and the
// index left empty while the job version stays); failed allocs are
// rescheduled by the group's reschedule policy (Reschedule) — at once when
// their delay has passed or desired_transition.reschedule is set, else a
// delayed eval is made and linked to the alloc by an AllocStop whose
// desired_status stays RUN and whose followup_eval_id names the eval
// (Nomad links the alloc the same way and leaves it desired-run). A batch
// alloc that completed, and a failed alloc with no attempts left, hold
// their index: nothing replaces them. A completed service alloc is
// replaced. Allocs of an older job version are updated in place when
// GroupUpdate allows it (and their node still passes the constraints),
// else replaced (stop + place, the stop only if the placement found a
// node), at most max_parallel per evaluation, counting new-version allocs
// not yet healthy (running for min_healthy_ms) against it.
//
// System jobs get one alloc of each group on every node that is
// schedulable, has the drivers, passes the constraints and has room. Allocs
// on down nodes are lost, on ineligible or draining nodes (unless the drain
// ignores system jobs) or nodes that fail the constraints they are stopped;
// none is replaced elsewhere. A failed system alloc is not replaced on its
// node until the job changes.
//
// Placement: nodes must be ready, eligible and not draining
// (rules.NodeSchedulable), have every task's driver detected and healthy, and
// pass the job's, group's and tasks' constraints (NodeAttribute lists the
// attributes; operators =, ==, !=, regexp, version, is_set, is_not_set,
// distinct_hosts). Resources are counted with rules.AllocsFit and
// rules.NodeCapacity, including what this plan already placed or stopped.
// Feasible nodes are scored by bin packing (BestFit-v3 on cpu and memory)
// averaged with an anti-affinity penalty per alloc of the group already on
// the node, relative to the group's even share of the nodes; ties go to
// the lowest node ID. Nodes are visited in an order derived from a hash of
// the eval and node IDs, and a placement scores at most
// DefaultCandidates(n) fitting nodes (log2 n, at least 16), continuing
// where the previous placement stopped, so a large job over a large
// cluster costs O(log n) per placement. A placement that finds no node
// records an AllocMetric (nodes evaluated, filtered per constraint or
// missing driver, exhausted per dimension); the group's further failures
// in the same evaluation are coalesced into it.
//
// Host volumes (host_volumes.go): a group volume of type "host" places
// only on nodes offering a host volume of its source's name, writable for
// a group that writes; a dynamic one is claimed like a CSI volume (the
// same claim rules, reserved with the placement) and recorded on the
// alloc (host_volume_ids), so a sticky volume keeps a replacement on it:
// the same node, the same volume ID, or no placement.
//
// PlanJob answers `job plan`: Diff against the stored job plus the
// annotations of a Schedule run with the new version, applied nowhere.
//
// Package schedtest holds an in-memory State, builders, and the
// throughput harness (MeasurePlace) used by make bench.
package scheduler
