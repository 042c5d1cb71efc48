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
