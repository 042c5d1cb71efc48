// Package testenv is the sdk's copy of internal/testutil's Unavailable, for
// sdk tests: sdk/ imports nothing of berth outside sdk/ (its tests
// included), so that it can become a module of its own.
//
// Unavailable ends a test that the machine cannot run (a missing device or
// tool): it skips normally and fails under CI=true, where a skip would let
// the gate report ok for something it never tested.
package testenv
