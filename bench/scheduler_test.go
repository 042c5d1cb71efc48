package main

import "testing"

// TestServerPathPlacesEveryAlloc runs the scheduler section's server path
// small: every alloc placed and the whole plan applied (it fails
// otherwise), with both halves timed.
func TestServerPathPlacesEveryAlloc(t *testing.T) {
	schedule, apply, one, err := measureServerPath(20, 60)
	if err != nil {
		t.Fatal(err)
	}
	if schedule <= 0 || apply <= 0 || one <= 0 {
		t.Fatalf("timings %v %v %v, want all positive", schedule, apply, one)
	}
	if _, _, _, err := measureServerPath(2, 200); err == nil {
		t.Fatal("200 allocs of 128 MB fit on two 8 GB nodes: the section must refuse a partial placement")
	}
}
