package server

import (
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/csi"
	"berth.dev/berth/csi/csifake"
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
		VolumeCapabilities: csiCapabilities(v)}}, nil)
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
