// Package testenv holds the sdk's test helpers: its copy of
// internal/testutil's Unavailable, for sdk tests (sdk/ is a module of its
// own and imports nothing of berth outside sdk/, its tests included), and
// the t.Log logger the conformance harnesses hand out.
//
// Unavailable ends a test that the machine cannot run (a missing device or
// tool): it skips normally and fails under CI=true, where a skip would let
// the gate report ok for something it never tested.
package testenv
