// Package schedtest builds scheduler inputs in code: an in-memory State
// (implementing scheduler.State) with an Apply that plays a plan into it,
// so tests can run evaluations in a row, builders for nodes, jobs, evals
// and allocs with sensible defaults, a sequential ID generator, and
// Cluster, the input of the scheduler throughput benchmark.
//
// It lives under host/scheduler, so it follows the same purity rule (no
// clock, no randomness, no I/O), and it is a regular package so the
// server's tests and the benchmark harness can reuse it.
package schedtest
