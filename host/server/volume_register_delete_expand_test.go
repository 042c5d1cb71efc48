package server

import (
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/csi"
	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/host/server/endpoints"
	"berth.dev/berth/rpc/pb"
)

// A secret given as the redaction marker keeps the stored value of its
// key; a marker with nothing stored to keep (a new key, a new volume) is
// refused, naming the key, and no plugin is asked anything.
func TestVolumeRegisterRefusesARedactedSecretWithNothingToKeep(t *testing.T) {
	p := csifake.New()
	_, s, vols, _, _ := volumeCluster(t, p)
	v := fsVolume("vault")
	v.Secrets = map[string]string{"password": "s3cret"}
	p.ValidateVolumeCapabilities.Next(&csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeCapabilities: endpoints.CSICapabilities(v)}}, nil)
	if _, err := vols.Register(ctx10s(t), &pb.VolumeRegisterRequest{Volume: v}); err != nil {
		t.Fatal(err)
	}
	calls := p.ValidateVolumeCapabilities.Count()

	again := fsVolume("vault")
	again.Secrets = map[string]string{"password": csi.Redacted, "token": csi.Redacted}
	_, err := vols.Register(ctx10s(t), &pb.VolumeRegisterRequest{Volume: again})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `volume "vault"`) ||
		!strings.Contains(err.Error(), "token") || strings.Contains(err.Error(), "password") {
		t.Errorf("re-register with a redacted new key: %v; want InvalidArgument naming volume vault and key token alone", err)
	}
	fresh := fsVolume("fresh")
	fresh.Secrets = map[string]string{"password": csi.Redacted}
	_, err = vols.Register(ctx10s(t), &pb.VolumeRegisterRequest{Volume: fresh})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `volume "fresh"`) || !strings.Contains(err.Error(), "password") {
		t.Errorf("register of a new volume with a redacted secret: %v; want InvalidArgument naming it and the key", err)
	}
	if got := p.ValidateVolumeCapabilities.Count(); got != calls {
		t.Errorf("the plugin was asked %d more times for refused registrations", got-calls)
	}
	stored, _ := s.fsm.State().VolumeByID(nil, "vault")
	if got := stored.GetSecrets(); len(got) != 1 || got["password"] != "s3cret" {
		t.Errorf("stored secrets after the refusals: %v", got)
	}
}

// registerFS registers an fsVolume with the fake plugin confirming it.
func registerFS(t *testing.T, p *csifake.Plugin, vols pb.VolumesClient, id string) *pb.Volume {
	t.Helper()
	v := fsVolume(id)
	p.ValidateVolumeCapabilities.Next(&csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeCapabilities: endpoints.CSICapabilities(v)}}, nil)
	res, err := vols.Register(ctx10s(t), &pb.VolumeRegisterRequest{Volume: v})
	if err != nil {
		t.Fatal(err)
	}
	return res.GetVolume()
}

// Volumes.Delete marks the volume deleting before the plugin's call: a
// claim asked meanwhile is refused (FailedPrecondition, naming the
// volume). A definite refusal of the plugin clears the mark, so the volume
// is claimed again; an uncertain one keeps it (the volume may be gone)
// until a delete completes, which deregisters it.
func TestVolumeDeleteMarksTheVolumeFirst(t *testing.T) {
	p := csifake.New()
	tc, s, vols, _, _ := volumeCluster(t, p)
	claims := pb.NewClaimsClient(tc.conn(s))
	registerFS(t, p, vols, "doomed")
	deleting := func() bool {
		v, _ := s.fsm.State().VolumeByID(nil, "doomed")
		return v.GetDeleting()
	}

	// The plugin will refuse for good, once released.
	p.DeleteVolume.Next(nil, status.Error(codes.FailedPrecondition, "volume has snapshots"))
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
	if !deleting() {
		t.Errorf("volume doomed is not marked deleting while its plugin deletes it")
	}
	_, err := claims.Claim(ctx10s(t), &pb.ClaimCreateRequest{VolumeId: "doomed"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), `"doomed"`) || !strings.Contains(err.Error(), "being deleted") {
		t.Errorf("claim during the delete: %v; want FailedPrecondition naming volume doomed as being deleted", err)
	}
	// The plugin refuses for good: the mark goes, the volume is claimable.
	release()
	if err := <-deleted; status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "volume has snapshots") || !strings.Contains(err.Error(), `"doomed"`) {
		t.Fatalf("delete refused by the plugin: %v; want its FailedPrecondition naming volume doomed", err)
	}
	if deleting() {
		t.Fatalf("volume doomed is still marked deleting after its plugin refused the delete for good")
	}
	c, err := claims.Claim(ctx10s(t), &pb.ClaimCreateRequest{VolumeId: "doomed"})
	if err != nil {
		t.Fatalf("claim after the failed delete: %v", err)
	}
	// A claimed volume is not marked at all.
	_, err = vols.Delete(ctx10s(t), &pb.VolumeDeleteRequest{VolumeId: "doomed"})
	if status.Code(err) != codes.FailedPrecondition || deleting() {
		t.Errorf("delete of a claimed volume: %v (deleting %v); want FailedPrecondition and no mark", err, deleting())
	}
	if _, err := claims.Release(ctx10s(t), &pb.ClaimReleaseRequest{ClaimId: c.GetClaim().GetId()}); err != nil {
		t.Fatal(err)
	}

	// Uncertain: the mark stays.
	registerFS(t, p, vols, "maybe")
	p.DeleteVolume.Next(nil, status.Error(codes.DeadlineExceeded, "timed out"))
	_, err = vols.Delete(ctx10s(t), &pb.VolumeDeleteRequest{VolumeId: "maybe"})
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "stays marked deleting") {
		t.Errorf("delete with an uncertain answer: %v; want DeadlineExceeded saying the mark stays", err)
	}
	if v, _ := s.fsm.State().VolumeByID(nil, "maybe"); !v.GetDeleting() {
		t.Errorf("volume maybe lost its deleting mark after an uncertain delete")
	}
	_, err = vols.Register(ctx10s(t), &pb.VolumeRegisterRequest{Volume: fsVolume("maybe")})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), `"maybe"`) {
		t.Errorf("register of a volume being deleted: %v; want FailedPrecondition naming it", err)
	}
	// Delete again: the plugin answers (NotFound is success), deregistered.
	p.DeleteVolume.Next(nil, status.Error(codes.NotFound, "no such volume"))
	if _, err := vols.Delete(ctx10s(t), &pb.VolumeDeleteRequest{VolumeId: "maybe"}); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	if v, _ := s.fsm.State().VolumeByID(nil, "maybe"); v != nil {
		t.Errorf("volume maybe is still registered after its delete completed: %v", v)
	}
}

// Expand records the plugin's capacity on the volume it read before the
// call only if the volume did not change meanwhile; a register made
// during the call is kept, and the capacity is recorded on top of it.
func TestVolumeExpandKeepsARegisterMadeDuringIt(t *testing.T) {
	p := csifake.New()
	_, s, vols, _, _ := volumeCluster(t, p)
	registerFS(t, p, vols, "grow")
	p.ControllerExpandVolume.Next(&csipb.ControllerExpandVolumeResponse{CapacityBytes: 20 << 30}, nil)
	release := p.ControllerExpandVolume.Block()
	expanded := make(chan error, 1)
	go func() {
		_, err := vols.Expand(ctx10s(t), &pb.VolumeExpandRequest{VolumeId: "grow", CapacityMinBytes: 20 << 30})
		expanded <- err
	}()
	for end := time.Now().Add(10 * time.Second); p.ControllerExpandVolume.Count() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the plugin never got ControllerExpandVolume")
		}
	}
	v := fsVolume("grow")
	v.Parameters = map[string]string{"tier": "gold"}
	p.ValidateVolumeCapabilities.Next(&csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeCapabilities: endpoints.CSICapabilities(v)}}, nil)
	if _, err := vols.Register(ctx10s(t), &pb.VolumeRegisterRequest{Volume: v}); err != nil {
		t.Fatal(err)
	}
	release()
	if err := <-expanded; err != nil {
		t.Fatalf("expand: %v", err)
	}
	stored, _ := s.fsm.State().VolumeByID(nil, "grow")
	if stored.GetParameters()["tier"] != "gold" || stored.GetCapacityBytes() != 20<<30 {
		t.Errorf("after an expand with a register during it: parameters %v, capacity %d; want the register's tier=gold and 20 GiB",
			stored.GetParameters(), stored.GetCapacityBytes())
	}
}
