package hostpath

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func newAccountingController(capacity int64) *controller {
	c := &controller{volumes: map[string]*volumeRecord{}, snapshots: map[string]*snapshotRecord{}}
	c.cfg.Capacity = capacity
	c.disk = func() (fsStats, error) { return fsStats{totalBytes: 1 << 50, availBytes: 1 << 50}, nil }
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

// A reservation's bytes count against the filesystem's free space until
// they are written, then only through statfs: a group snapshot's written
// members do not keep counting twice against an operation running beside
// it, and the capacity account still holds them until the handover.
func TestWrittenBytesLeaveTheDiskReservation(t *testing.T) {
	c := newAccountingController(100)
	avail := int64(70)
	c.disk = func() (fsStats, error) { return fsStats{totalBytes: 1 << 50, availBytes: avail}, nil }
	group, err := c.reserve(60, "group snapshot g")
	if err != nil {
		t.Fatal(err)
	}
	avail -= 30 // the first member's copy is written
	group.written(30)
	if got := c.free(t); got != 10 {
		t.Fatalf("free with one of two members written = %d, want 10 (40 free on the disk less the 30 still to write)", got)
	}
	other, err := c.reserve(10, "volume beside it")
	if err != nil {
		t.Fatalf("a create that fits beside the group: %v", err)
	}
	other.release()
	c.mu.Lock()
	capacityHeld := c.reserved
	c.mu.Unlock()
	if capacityHeld != 60 {
		t.Errorf("capacity reserved = %d, want the group's 60 until the handover", capacityHeld)
	}
	group.written(100) // more than is left to write: no more than the reservation leaves
	group.release()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reserved != 0 || c.diskReserved != 0 {
		t.Errorf("after release: reserved %d, on the disk %d; want none", c.reserved, c.diskReserved)
	}
}
