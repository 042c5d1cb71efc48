package server

import (
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/csi"
	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/host/server/endpoints"
	"berth.dev/berth/rpc/pb"
)

// Reads answer a volume's secrets as "[REDACTED]";
// an operator who registers again what `volume status -json` printed
// (Nomad's edit-and-reregister habit; the server-set fields removed) stores "[REDACTED]" as the secret's
// value, and every later plugin call (publish, node stage through
// ClientClaim, delete) sends it as the credential. Register should keep
// the stored value for a redacted one, or refuse it.
func TestReregisteringARedactedVolumeKeepsItsSecret(t *testing.T) {
	const secret = "pl4nted-s3cret-value"
	p := csifake.New()
	_, s, vols, _, _ := volumeCluster(t, p)
	v := fsVolume("vault")
	v.Secrets = map[string]string{"password": secret}
	confirm := func() {
		p.ValidateVolumeCapabilities.Next(&csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{
			VolumeCapabilities: endpoints.CSICapabilities(v)}}, nil)
	}
	confirm()
	if _, err := vols.Register(ctx10s(t), &pb.VolumeRegisterRequest{Volume: v}); err != nil {
		t.Fatal(err)
	}
	get, err := vols.Get(ctx10s(t), &pb.VolumeGetRequest{VolumeId: "vault"})
	if err != nil {
		t.Fatal(err)
	}
	shown := proto.CloneOf(get.GetVolume().GetVolume())
	if shown.GetSecrets()["password"] != csi.Redacted {
		t.Fatalf("get shows %v", shown.GetSecrets())
	}
	// A verbatim copy is refused for its server-set fields; the operator
	// keeps the specification's fields, the secrets as shown among them.
	again := fsVolume("vault")
	again.Secrets = shown.GetSecrets()
	confirm()
	_, err = vols.Register(ctx10s(t), &pb.VolumeRegisterRequest{Volume: again})
	stored, _ := s.fsm.State().VolumeByID(nil, "vault")
	if got := stored.GetSecrets()["password"]; got != secret {
		t.Errorf("after re-registering the volume as read (err %v), its stored secret is %q, not the one registered", err, got)
	}
}

// Volumes.Delete checks for claims on a snapshot, then asks the plugin to
// delete the volume (seconds, through a node), then deregisters. A claim
// reserved in between (a placement or an operator's claim: nothing in the
// state says the volume is being deleted) is granted, the plugin deletes
// the data under it, and the deregister is refused (the volume has a
// claim): the claimant runs on a deleted volume.
func TestVolumeDeleteRacesANewClaim(t *testing.T) {
	p := csifake.New()
	tc, s, vols, _, _ := volumeCluster(t, p)
	v := fsVolume("doomed")
	p.ValidateVolumeCapabilities.Next(&csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeCapabilities: endpoints.CSICapabilities(v)}}, nil)
	if _, err := vols.Register(ctx10s(t), &pb.VolumeRegisterRequest{Volume: v}); err != nil {
		t.Fatal(err)
	}
	release := p.DeleteVolume.Block()
	deleted := make(chan error, 1)
	go func() {
		_, err := vols.Delete(ctx10s(t), &pb.VolumeDeleteRequest{VolumeId: "doomed"})
		deleted <- err
	}()
	for end := time.Now().Add(10 * time.Second); p.DeleteVolume.Count() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the plugin never got DeleteVolume")
		}
	}
	claim, claimErr := pb.NewClaimsClient(tc.conn(s)).Claim(ctx10s(t), &pb.ClaimCreateRequest{VolumeId: "doomed"})
	release()
	delErr := <-deleted
	if claimErr == nil {
		t.Errorf("volume %q was claimed (%s, %s) while its plugin deleted it; Delete answered: %v",
			"doomed", claim.GetClaim().GetId(), claim.GetClaim().GetState(), delErr)
	}
}
