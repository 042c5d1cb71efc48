package fsm_test

import (
	"fmt"
	"testing"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// statsState holds n claims spread over the live states, n/2 attachments
// and n allocs; the claim i started its state at 1000+i, so the oldest of
// a state is its first claim.
func statsState(t testing.TB, n int) *fsm.StateStore {
	f := fsm.New(testLogger(t))
	var claims []*pb.Claim
	var atts []*pb.Attachment
	var allocs []*pb.Allocation
	for i := range n {
		st := pb.ClaimState(1 + i%5)
		c := &pb.Claim{Id: fmt.Sprintf("c%06d", i), VolumeId: fmt.Sprintf("v%d", i), AllocId: fmt.Sprintf("a%06d", i), NodeId: "n1",
			State: st, CreatedAt: 1, ModifiedAt: 5000 + int64(i)}
		if i%2 == 0 {
			c.StateEnteredAt = 1000 + int64(i)
		}
		claims = append(claims, c)
		if i%2 == 0 {
			atts = append(atts, &pb.Attachment{VolumeId: c.GetVolumeId(), NodeId: "n1", State: pb.AttachmentState(1 + i%3)})
		}
		allocs = append(allocs, &pb.Allocation{Id: fmt.Sprintf("a%06d", i), NodeId: "n1", JobId: "j", ClientStatus: pb.AllocClientStatus(1 + i%5)})
	}
	if err := f.State().PutRowsUnchecked(1, claims, atts, allocs); err != nil {
		t.Fatal(err)
	}
	return f.State()
}

// The gauges' read counts every row by state, and the oldest start per
// state is state_entered_at, or modified_at for a claim without it.
func TestStorageStats(t *testing.T) {
	s, err := statsState(t, 10).StorageStats()
	if err != nil {
		t.Fatal(err)
	}
	// Claims 0..9: state 1+i%5, so two per state; state_entered_at on even i.
	wantClaims := []int{0, 2, 2, 2, 2, 2, 0}
	// State 1: claims 0 (since 1000) and 5 (modified 5005) → 1000.
	// State 2: claims 1 (modified 5001) and 6 (since 1006) → 1006.
	wantOldest := []int64{0, 1000, 1006, 1002, 1008, 1004, 0}
	if fmt.Sprint(s.Claims) != fmt.Sprint(wantClaims) || fmt.Sprint(s.OldestClaim) != fmt.Sprint(wantOldest) {
		t.Errorf("claims %v oldest %v, want %v %v", s.Claims, s.OldestClaim, wantClaims, wantOldest)
	}
	// Attachments of claims 0,2,4,6,8: state 1+i%3 → 1,3,2,1,3.
	if want := []int{0, 2, 1, 2, 0}; fmt.Sprint(s.Attachments) != fmt.Sprint(want) {
		t.Errorf("attachments %v, want %v", s.Attachments, want)
	}
	if want := []int{0, 2, 2, 2, 2, 2}; fmt.Sprint(s.Allocs) != fmt.Sprint(want) {
		t.Errorf("allocs %v, want %v", s.Allocs, want)
	}
}

// A claim without state_entered_at falls back to modified_at, then created_at.
func TestClaimStateStart(t *testing.T) {
	for _, tc := range []struct {
		c    *pb.Claim
		want int64
	}{
		{&pb.Claim{StateEnteredAt: 3, ModifiedAt: 9, CreatedAt: 1}, 3},
		{&pb.Claim{ModifiedAt: 9, CreatedAt: 1}, 9},
		{&pb.Claim{CreatedAt: 1}, 1},
	} {
		if got := fsm.ClaimStateStart(tc.c); got != tc.want {
			t.Errorf("ClaimStateStart(%v) = %d, want %d", tc.c, got, tc.want)
		}
	}
}

// BenchmarkStorageStats is one scrape's read of a large state: 10 000
// claims, 5 000 attachments, 10 000 allocs.
func BenchmarkStorageStats(b *testing.B) {
	st := statsState(b, 10000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := st.StorageStats(); err != nil {
			b.Fatal(err)
		}
	}
}
