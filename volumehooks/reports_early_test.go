package volumehooks

import (
	"errors"
	"testing"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// heldReports is memReports whose writes wait for release: a slow fsync.
type heldReports struct {
	*memReports
	writing chan struct{} // gets a value as a write begins
	release chan struct{}
}

func (s *heldReports) PutVolumeReport(rec *pb.VolumeReportRecord) error {
	s.writing <- struct{}{}
	<-s.release
	return s.memReports.PutVolumeReport(rec)
}

// A queued report is sent while its record is being written, not after
// (issue 26: a volume move's node-detached report waited for the state
// DB's fsync before its raft write began); Queue still returns only once
// the record is written, and a report delivered during the write leaves
// no record behind once the write ends.
func TestAReportIsSentWhileItsRecordIsWritten(t *testing.T) {
	store := &heldReports{memReports: &memReports{recs: map[string]*pb.VolumeReportRecord{}},
		writing: make(chan struct{}, 1), release: make(chan struct{})}
	claims := newFakeClaims()
	// Delivered only once the write began: Queue wakes the sender before
	// it writes, and a delivery first would skip the write.
	gated := &heldUpdates{fakeClaims: claims, gate: make(chan struct{})}
	rep, err := NewReporter(ReporterConfig{Claims: gated, Store: store, Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	go rep.Run(ctx)

	detached := claimReport(volNodeID, "a1", "", "v1")
	detached.State = pb.ClaimState_CLAIM_STATE_NODE_DETACHED
	queued := make(chan struct{})
	go func() {
		rep.Queue(detached)
		close(queued)
	}()
	<-store.writing
	close(gated.gate)
	// The write is held: the report reaches the servers all the same.
	claims.waitUpdate(t, "a1", "v1", pb.ClaimState_CLAIM_STATE_NODE_DETACHED, false)
	select {
	case <-queued:
		t.Fatal("Queue returned before the report's record was written")
	default:
	}
	close(store.release)
	<-queued
	testutil.WaitFor(t, volWait, func() error {
		if n, p := store.len(), len(rep.Pending()); n != 0 || p != 0 {
			return errors.New("a delivered report is still persisted or pending")
		}
		return nil
	})
}
