package hostpath

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func newAccountingController(capacity int64) *controller {
	c := &controller{volumes: map[string]*volumeRecord{}, snapshots: map[string]*snapshotRecord{}}
	c.cfg.Capacity = capacity
	c.diskFree = func() (int64, error) { return 1 << 50, nil }
	return c
}

func (c *controller) free(t *testing.T) int64 {
	t.Helper()
	got, err := c.available()
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// The bytes of a reservation count exactly once: while the operation runs,
// after it hands them to the object it made, and never again after a late
// release.
func TestReservationIsHandedOverWithoutDoubleCounting(t *testing.T) {
	c := newAccountingController(100)
	res, err := c.reserve(40, "volume a")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.free(t); got != 60 {
		t.Fatalf("free while reserved = %d, want 60", got)
	}
	c.mu.Lock()
	c.volumes["a"] = &volumeRecord{ID: "a", CapacityBytes: 40}
	res.handOverLocked()
	c.mu.Unlock()
	if got := c.free(t); got != 60 {
		t.Fatalf("free after handover = %d, want 60 (counted twice or not at all)", got)
	}
	res.release() // the deferred release of a successful operation
	if got := c.free(t); got != 60 {
		t.Fatalf("free after a late release = %d, want 60", got)
	}

	// A failed operation gives its bytes back, once.
	failed, err := c.reserve(60, "volume b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.reserve(1, "volume c"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("reserve beyond capacity: %v, want ResourceExhausted", err)
	}
	failed.release()
	failed.release()
	if got := c.free(t); got != 60 {
		t.Fatalf("free after release = %d, want 60", got)
	}
	if _, err := c.reserve(101, "volume d"); status.Code(err) != codes.OutOfRange {
		t.Fatalf("reserve above the whole capacity: %v, want OutOfRange", err)
	}
}
