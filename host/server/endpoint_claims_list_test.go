package server

import (
	"slices"
	"testing"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// Volumes.Claims without a volume lists every volume's claims in claim ID
// order, paged from next_token on, so a claim is found by a prefix of its
// ID (`berth volume release PREFIX`). Before, a volume ID was required and
// the CLI had to know the full claim ID.
func TestVolumeClaimsOfEveryVolume(t *testing.T) {
	cc := newClaimCluster(t, 1, false)
	cc.volume(t, "data", mnr)
	cc.volume(t, "logs", mnr)
	for _, c := range []struct{ id, volume string }{{"c0ffee01", "logs"}, {"c0ffee02", "data"}, {"beef0001", "data"}, {"d00d0001", "logs"}} {
		claim := &pb.Claim{Id: c.id, VolumeId: c.volume, Operator: true, NodeId: cc.n1.GetId(), Mode: pb.ClaimMode_CLAIM_MODE_READ,
			AccessMode: mnr, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}
		if _, err := cc.s.raftApply(ctx10s(t), fsm.OperatorClaim, &pb.OperatorClaimCommand{Claim: claim}); err != nil {
			t.Fatal(err)
		}
	}
	vols := pb.NewVolumesClient(cc.tc.conn(cc.s))
	ids := func(cs []*pb.Claim) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.GetId()+"@"+c.GetVolumeId())
		}
		return out
	}

	all, err := vols.Claims(ctx10s(t), &pb.VolumeClaimsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ids(all.GetClaims()), []string{"beef0001@data", "c0ffee01@logs", "c0ffee02@data", "d00d0001@logs"}; !slices.Equal(got, want) {
		t.Fatalf("every claim: %q, want %q", got, want)
	}
	if all.GetMeta().GetIndex() == 0 || all.GetMeta().GetNextToken() != "" {
		t.Fatalf("meta %v: want an index and no next page", all.GetMeta())
	}
	// From a prefix, two at a time: the page starts at the first ID at or
	// after it and says where the next one starts.
	page, err := vols.Claims(ctx10s(t), &pb.VolumeClaimsRequest{Query: &pb.QueryOptions{NextToken: "c0ff", PerPage: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ids(page.GetClaims()), []string{"c0ffee01@logs", "c0ffee02@data"}; !slices.Equal(got, want) || page.GetMeta().GetNextToken() != "d00d0001" {
		t.Fatalf("page from c0ff: %q next %q, want %q next d00d0001", got, page.GetMeta().GetNextToken(), want)
	}
	// One volume's claims are still that volume's only.
	data, err := vols.Claims(ctx10s(t), &pb.VolumeClaimsRequest{VolumeId: "data"})
	if got, want := ids(data.GetClaims()), []string{"beef0001@data", "c0ffee02@data"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("claims of data: %q, %v; want %q", got, err, want)
	}
}

// The claims list filters by operator, node and state (every volume's and
// one volume's alike), so `berth volume release PREFIX` matches operators'
// claims only: an allocation's claim sharing the prefix made it ambiguous.
func TestVolumeClaimsFilters(t *testing.T) {
	cc := newClaimCluster(t, 1, false)
	cc.volume(t, "data", snw)
	cc.volume(t, "logs", mnr)
	cc.placeWithClaim(t, "web", cc.n1.GetId(), "data", false) // claim-a-web, an allocation's
	op := &pb.Claim{Id: "claim-op", VolumeId: "logs", Operator: true, NodeId: cc.n1.GetId(), Mode: pb.ClaimMode_CLAIM_MODE_READ,
		AccessMode: mnr, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}
	if _, err := cc.s.raftApply(ctx10s(t), fsm.OperatorClaim, &pb.OperatorClaimCommand{Claim: op}); err != nil {
		t.Fatal(err)
	}
	stored, _ := cc.s.fsm.State().ClaimByID(nil, "claim-op")
	vols := pb.NewVolumesClient(cc.tc.conn(cc.s))
	other := pb.ClaimState_CLAIM_STATE_RELEASING
	if stored.GetState() == other {
		other = pb.ClaimState_CLAIM_STATE_IN_USE
	}
	for _, tt := range []struct {
		name string
		req  *pb.VolumeClaimsRequest
		want []string
	}{
		{"every claim", &pb.VolumeClaimsRequest{}, []string{"claim-a-web", "claim-op"}},
		{"operator", &pb.VolumeClaimsRequest{Operator: true}, []string{"claim-op"}},
		{"operator from a shared prefix", &pb.VolumeClaimsRequest{Operator: true, Query: &pb.QueryOptions{NextToken: "claim-"}}, []string{"claim-op"}},
		{"node n1", &pb.VolumeClaimsRequest{NodeId: cc.n1.GetId()}, []string{"claim-a-web", "claim-op"}},
		{"node n2", &pb.VolumeClaimsRequest{NodeId: cc.n2.GetId()}, nil},
		{"its state", &pb.VolumeClaimsRequest{State: stored.GetState()}, []string{"claim-op"}},
		{"another state", &pb.VolumeClaimsRequest{Operator: true, State: other}, nil},
		{"one volume, operator", &pb.VolumeClaimsRequest{VolumeId: "data", Operator: true}, nil},
		{"one volume", &pb.VolumeClaimsRequest{VolumeId: "data"}, []string{"claim-a-web"}},
	} {
		resp, err := vols.Claims(ctx10s(t), tt.req)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		var got []string
		for _, c := range resp.GetClaims() {
			got = append(got, c.GetId())
		}
		if tt.name == "its state" {
			// The allocation's claim may be in the same state: only the
			// operator's must be there.
			if !slices.Contains(got, "claim-op") {
				t.Fatalf("%s (%s): %q, want claim-op among them", tt.name, stored.GetState(), got)
			}
			for _, c := range resp.GetClaims() {
				if c.GetState() != stored.GetState() {
					t.Fatalf("%s (%s): %s is %s", tt.name, stored.GetState(), c.GetId(), c.GetState())
				}
			}
			continue
		}
		if !slices.Equal(got, tt.want) {
			t.Fatalf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}
