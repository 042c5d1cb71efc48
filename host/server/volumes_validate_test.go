package server

import (
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/host/server/endpoints"
	"berth.dev/berth/rpc/pb"
)

// An answer to ValidateVolumeCapabilities without `confirmed` means the
// plugin validated nothing it is sure of (Azure's and Linode's plugins
// answer valid so): the volume is registered, and the plugin's message is
// a warning in the answer and in the server's log. With `confirmed`, a
// field berth sent that the plugin dropped is refused, FailedPrecondition
// (409) naming the field; a full echo, with or without a message,
// registers with no warning.
func TestVolumeRegisterTakesAnUnconfirmedAnswerAsAWarning(t *testing.T) {
	p := csifake.New()
	_, s, vols, n, logs := volumeCluster(t, p)
	flagged := func(id string) *pb.Volume {
		v := fsVolume(id)
		v.MountOptions.MountFlags = []string{"noatime"}
		return v
	}
	register := func(v *pb.Volume, answer *csipb.ValidateVolumeCapabilitiesResponse) (*pb.VolumeRegisterResponse, error) {
		p.ValidateVolumeCapabilities.Next(answer, nil)
		return vols.Register(ctx10s(t), &pb.VolumeRegisterRequest{Volume: v})
	}
	registered := func(id string) bool {
		v, _ := s.fsm.State().VolumeByID(nil, id)
		return v != nil
	}

	t.Run("valid without confirmed, with a message (Azure style)", func(t *testing.T) {
		resp, err := register(flagged("azure"), &csipb.ValidateVolumeCapabilitiesResponse{Message: "disk capabilities are valid"})
		if err != nil || !registered("azure") {
			t.Fatalf("register: %v (registered %v)", err, registered("azure"))
		}
		if w := resp.GetWarnings(); len(w) != 1 || !strings.Contains(w[0], `"disk capabilities are valid"`) ||
			!strings.Contains(w[0], `volume "azure"`) || !strings.Contains(w[0], `csi plugin "hp"`) || !strings.Contains(w[0], n.GetId()) ||
			!strings.Contains(w[0], "without confirming") {
			t.Errorf("warnings %q: want one naming the volume, the plugin, its node and the plugin's message", w)
		}
		if !strings.Contains(logs.String(), "disk capabilities are valid") || !strings.Contains(logs.String(), "volume_id=azure") {
			t.Errorf("the warning is not in the server's log:\n%s", logs.String())
		}
	})
	t.Run("valid without confirmed or message (Linode style)", func(t *testing.T) {
		resp, err := register(flagged("linode"), &csipb.ValidateVolumeCapabilitiesResponse{})
		if err != nil || !registered("linode") {
			t.Fatalf("register: %v", err)
		}
		if w := resp.GetWarnings(); len(w) != 1 || !strings.Contains(w[0], "it gave no message") || !strings.Contains(w[0], `volume "linode"`) {
			t.Errorf("warnings %q", w)
		}
	})
	t.Run("confirmed, dropping a field berth sent", func(t *testing.T) {
		v := flagged("old")
		dropped := endpoints.CSICapabilities(v)
		dropped[0].GetMount().MountFlags = nil
		_, err := register(v, &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{VolumeCapabilities: dropped}})
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "volume_capabilities[0].mount.mount_flags") ||
			!strings.Contains(err.Error(), `volume "old"`) || !strings.Contains(err.Error(), "dropped") {
			t.Fatalf("register: %v; want FailedPrecondition naming volume old and the dropped field", err)
		}
		if registered("old") {
			t.Error("volume old was registered")
		}
	})
	t.Run("confirmed by the access mode alone", func(t *testing.T) {
		v := flagged("modeonly")
		caps := endpoints.CSICapabilities(v)
		for _, c := range caps {
			c.AccessType = nil
		}
		resp, err := register(v, &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{VolumeCapabilities: caps}})
		if err != nil || !registered("modeonly") {
			t.Fatalf("register: %v (registered %v)", err, registered("modeonly"))
		}
		if w := resp.GetWarnings(); len(w) != 1 || !strings.Contains(w[0], `volume "modeonly"`) || !strings.Contains(w[0], "without an access type") ||
			!strings.Contains(w[0], "volume_capabilities[0]") {
			t.Errorf("warnings %q: want one naming the volume and the capability confirmed without an access type", w)
		}
	})
	t.Run("an empty confirmed is unconfirmed, its message a warning", func(t *testing.T) {
		resp, err := register(flagged("empty"), &csipb.ValidateVolumeCapabilitiesResponse{
			Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{}, Message: "cannot tell"})
		if err != nil || !registered("empty") {
			t.Fatalf("register: %v (registered %v)", err, registered("empty"))
		}
		if w := resp.GetWarnings(); len(w) != 1 || !strings.Contains(w[0], `"cannot tell"`) || !strings.Contains(w[0], "without confirming") {
			t.Errorf("warnings %q", w)
		}
	})
	t.Run("confirmed fully, with or without a message", func(t *testing.T) {
		for _, msg := range []string{"", "ok"} {
			id := "full" + msg
			v := flagged(id)
			resp, err := register(v, &csipb.ValidateVolumeCapabilitiesResponse{Message: msg,
				Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{VolumeCapabilities: endpoints.CSICapabilities(v)}})
			if err != nil || !registered(id) || len(resp.GetWarnings()) != 0 {
				t.Fatalf("register %s: %v, %v (registered %v)", id, resp, err, registered(id))
			}
		}
	})
}
