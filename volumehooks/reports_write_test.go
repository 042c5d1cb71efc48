package volumehooks

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// gatedReports is memReports whose writes wait for the test's answer, and
// which tells of its deletes.
type gatedReports struct {
	*memReports
	writes  chan *pb.VolumeReportRecord // a write begins
	answer  chan error                  // its outcome
	deleted chan string
}

func newGatedReports() *gatedReports {
	return &gatedReports{memReports: &memReports{recs: map[string]*pb.VolumeReportRecord{}},
		writes: make(chan *pb.VolumeReportRecord), answer: make(chan error), deleted: make(chan string, 16)}
}

func (s *gatedReports) PutVolumeReport(rec *pb.VolumeReportRecord) error {
	s.writes <- rec
	if err := <-s.answer; err != nil {
		return err
	}
	return s.memReports.PutVolumeReport(rec)
}

func (s *gatedReports) DeleteVolumeReport(req *pb.ClientClaimUpdateRequest) error {
	err := s.memReports.DeleteVolumeReport(req)
	s.deleted <- reportKey(req)
	return err
}

// heldClaims answers each report as the test says.
type heldClaims struct {
	calls  chan *pb.ClientClaimUpdateRequest
	answer chan error
}

func (c *heldClaims) ClientClaim(context.Context, *pb.ClientClaimRequest) (*pb.ClientClaimResponse, error) {
	return nil, status.Error(codes.Unimplemented, "not in this test")
}

func (c *heldClaims) ClientClaimUpdate(ctx context.Context, req *pb.ClientClaimUpdateRequest) (*pb.ClientClaimUpdateResponse, error) {
	c.calls <- req
	if err := <-c.answer; err != nil {
		return nil, err
	}
	return &pb.ClientClaimUpdateResponse{}, nil
}

// unavailable refuses every report for now.
type unavailable struct{}

func (unavailable) ClientClaim(context.Context, *pb.ClientClaimRequest) (*pb.ClientClaimResponse, error) {
	return nil, status.Error(codes.Unavailable, "no leader")
}

func (unavailable) ClientClaimUpdate(context.Context, *pb.ClientClaimUpdateRequest) (*pb.ClientClaimUpdateResponse, error) {
	return nil, status.Error(codes.Unavailable, "no leader")
}

// recv is <-ch within the test's wait.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(volWait):
		t.Fatalf("no %s in %v", what, volWait)
		panic("unreachable")
	}
}

// A report whose write failed while it was on its way (sent before the
// write ended) is written again before its next try, and its record
// removed once it is delivered.
func TestAReportWhoseWriteFailedInFlightIsWrittenBeforeItsRetry(t *testing.T) {
	store, claims := newGatedReports(), &heldClaims{calls: make(chan *pb.ClientClaimUpdateRequest), answer: make(chan error)}
	rep, err := NewReporter(ReporterConfig{Claims: claims, Store: store, Logger: testutil.Logger(t),
		RetryStart: time.Millisecond, RetryMax: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	go rep.Run(t.Context())
	detached := claimReport(volNodeID, "a1", "", "v1")
	detached.State = pb.ClaimState_CLAIM_STATE_NODE_DETACHED
	queued := make(chan struct{})
	go func() {
		rep.Queue(detached)
		close(queued)
	}()
	recv(t, store.writes, "write of the queued report")
	recv(t, claims.calls, "send of the report while its write is held")
	store.answer <- errors.New("write state.db: no space left on device")
	<-queued
	claims.answer <- status.Error(codes.Unavailable, "no leader")
	select {
	case rec := <-store.writes:
		if rec.GetRequest().GetState() != pb.ClaimState_CLAIM_STATE_NODE_DETACHED {
			t.Fatalf("wrote %v, want the report again", rec)
		}
	case <-claims.calls:
		t.Fatal("the report was tried again before its failed write was made again")
	case <-time.After(volWait):
		t.Fatal("no retry")
	}
	store.answer <- nil
	recv(t, claims.calls, "retry")
	claims.answer <- nil
	recv(t, store.deleted, "delete of the delivered report")
	if n, p := store.len(), len(rep.Pending()); n != 0 || p != 0 {
		t.Fatalf("%d records, %d pending after delivery, want none", n, p)
	}
}

// A report replaced while an older one's write is held is not written:
// the store gets the oldest (its write was under way) and then the newest,
// never the one between, which could otherwise land after the newest.
func TestAReplacedReportIsNotWritten(t *testing.T) {
	store := newGatedReports()
	rep, err := NewReporter(ReporterConfig{Claims: unavailable{}, Store: store, Logger: testutil.Logger(t),
		RetryStart: time.Hour, RetryMax: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	go rep.Run(t.Context())
	report := func(s pb.ClaimState) *pb.ClientClaimUpdateRequest {
		r := claimReport(volNodeID, "a1", "", "v1")
		r.State = s
		return r
	}
	states := []pb.ClaimState{pb.ClaimState_CLAIM_STATE_IN_USE, pb.ClaimState_CLAIM_STATE_RELEASING, pb.ClaimState_CLAIM_STATE_NODE_DETACHED}
	done := make(chan struct{}, len(states))
	queue := func(s pb.ClaimState) {
		go func() {
			rep.Queue(report(s))
			done <- struct{}{}
		}()
	}
	queue(states[0])
	if got := recv(t, store.writes, "first write").GetRequest().GetState(); got != states[0] {
		t.Fatalf("first write %v, want %v", got, states[0])
	}
	// Held: the next two are queued behind it, one after the other.
	for _, s := range states[1:] {
		queue(s)
		testutil.WaitFor(t, volWait, func() error {
			if p := rep.Pending(); len(p) != 1 || p[0].GetState() != s {
				return errors.New("not queued yet")
			}
			return nil
		})
	}
	store.answer <- nil
	if got := recv(t, store.writes, "second write").GetRequest().GetState(); got != states[2] {
		t.Fatalf("second write %v, want the newest, %v", got, states[2])
	}
	store.answer <- nil
	for range states {
		recv(t, done, "Queue's return")
	}
	recs, _ := store.VolumeReports()
	if len(recs) != 1 || recs[0].GetRequest().GetState() != states[2] {
		t.Fatalf("records %v, want the newest report alone", recs)
	}
}
