// Package evals is the leader's evaluation machinery: the broker that hands
// pending evaluations to scheduler workers, the workers that plan them with
// the pure scheduler (host/scheduler) and propose each plan, and the feed
// that keeps the broker in step with the replicated state and wakes blocked
// evaluations when capacity (or a volume claim) may have been freed.
//
// The server core builds one Runner for its whole life with NewRunner,
// passing what the loops need of it as a Core (the local state store, the
// leader's proposals, the table rule's version check). While the server
// leads and its barrier has passed, it enables the Runner's Broker and
// calls Run with the leadership's context; when the leadership ends (or a
// snapshot restore replaces the state) it cancels that context and
// disables the broker, which drops everything: a new leader rebuilds it
// from the pending evaluations in the state, and wakes every blocked one.
// A blocked evaluation is woken into the broker in memory, without a raft
// write (Broker.wake): it stays blocked in the state until the plan of
// its run records the outcome, so a claim freed is reserved for the next
// alloc by the first plan after the apply that freed it.
//
// Evaluations are made by whoever proposes the change that needs one (New,
// ForNode), and travel inside that change's command, so a change is never
// applied without the evaluation that acts on it.
//
// SchedulerState adapts a state snapshot to what the scheduler reads; the
// workers, the job plan endpoint and the benchmarks use it.
package evals
