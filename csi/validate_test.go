package csi_test

import (
	"errors"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/csi"
	"berth.dev/berth/rpc/errcode"
)

// TestValidateVolumeCapabilities runs the fake plugin through every way a
// plugin answers: without `confirmed` (Azure's and Linode's plugins answer
// valid so, with a message or none) the answer is unconfirmed, carrying
// the message; with `confirmed`, only the fields berth sent are compared,
// and one an older plugin dropped or changed is a FailedPrecondition naming
// the field.
func TestValidateVolumeCapabilities(t *testing.T) {
	p, _, c := startFake(t)
	ctx := testCtx(t)

	rw := mountCap("ext4", csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	ro := mountCap("ext4", csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)
	grouped := mountCap("ext4", csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	grouped.GetMount().VolumeMountGroup = "1000"
	flagged := mountCap("ext4", csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	flagged.GetMount().MountFlags = []string{"noatime", "nodev"}
	bare := mountCap("", csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	block := &csipb.VolumeCapability{AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
	request := func() *csipb.ValidateVolumeCapabilitiesRequest {
		return &csipb.ValidateVolumeCapabilitiesRequest{
			VolumeId:           "v1",
			VolumeCapabilities: []*csipb.VolumeCapability{rw, ro},
			VolumeContext:      map[string]string{"path": "/srv/v1"},
			Parameters:         map[string]string{"tier": "fast"},
		}
	}
	asking := func(caps ...*csipb.VolumeCapability) func() *csipb.ValidateVolumeCapabilitiesRequest {
		return func() *csipb.ValidateVolumeCapabilitiesRequest {
			return &csipb.ValidateVolumeCapabilitiesRequest{VolumeId: "v1", VolumeCapabilities: caps}
		}
	}
	confirmed := func(caps ...*csipb.VolumeCapability) *csipb.ValidateVolumeCapabilitiesResponse_Confirmed {
		return &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{VolumeCapabilities: caps}
	}

	cases := []struct {
		name    string
		req     func() *csipb.ValidateVolumeCapabilitiesRequest
		resp    *csipb.ValidateVolumeCapabilitiesResponse
		want    csi.Validation
		wantErr []string // substrings of an ErrConfirmationMismatch; nil means no error
	}{
		{
			name: "full echo confirms",
			req:  request,
			resp: &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{
				VolumeCapabilities: []*csipb.VolumeCapability{rw, ro},
				VolumeContext:      map[string]string{"path": "/srv/v1"},
				Parameters:         map[string]string{"tier": "fast"},
			}, Message: "all good"},
			want: csi.Validation{Confirmed: true, Message: "all good"},
		},
		{
			name: "confirmed with no message",
			req:  request,
			resp: &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: confirmed(rw, ro)},
			want: csi.Validation{Confirmed: true},
		},
		{
			name: "capabilities in another order, context and parameters not echoed",
			req:  request,
			resp: &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: confirmed(ro, rw)},
			want: csi.Validation{Confirmed: true},
		},
		{
			name: "valid without confirmed, with a message (Azure style)",
			req:  request,
			resp: &csipb.ValidateVolumeCapabilitiesResponse{Message: "volume capabilities are supported"},
			want: csi.Validation{Message: "volume capabilities are supported"},
		},
		{
			name: "valid without confirmed or message (Linode style)",
			req:  request,
			resp: &csipb.ValidateVolumeCapabilitiesResponse{},
			want: csi.Validation{},
		},
		{
			name: "what berth did not send is not compared: a default fs_type, an extra capability, extra keys",
			req:  asking(bare),
			resp: &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{
				VolumeCapabilities: []*csipb.VolumeCapability{ro, rw},
				VolumeContext:      map[string]string{"added": "by the plugin"},
			}},
			want: csi.Validation{Confirmed: true},
		},
		{
			name: "mount flags in another order",
			req:  asking(flagged),
			resp: &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: confirmed(func() *csipb.VolumeCapability {
				c := mountCap("ext4", csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
				c.GetMount().MountFlags = []string{"nodev", "noatime"}
				return c
			}())},
			want: csi.Validation{Confirmed: true},
		},
		{
			name:    "fewer capabilities echoed",
			req:     request,
			resp:    &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: confirmed(rw)},
			wantErr: []string{`field volume_capabilities[1].access_mode.mode sent as "MULTI_NODE_READER_ONLY", confirmed as "SINGLE_NODE_WRITER"`},
		},
		{
			name: "older plugin drops volume_mount_group",
			req:  asking(grouped),
			resp: &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: confirmed(rw)},
			wantErr: []string{
				`volume_capabilities[0] (mount(fs_type=ext4 volume_mount_group=1000) SINGLE_NODE_WRITER)`,
				`field volume_capabilities[0].mount.volume_mount_group sent as "1000", dropped from the confirmation`,
			},
		},
		{
			name:    "older plugin drops mount_flags",
			req:     asking(flagged),
			resp:    &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: confirmed(rw)},
			wantErr: []string{`field volume_capabilities[0].mount.mount_flags sent as "noatime,nodev", confirmed as "": noatime,nodev dropped`},
		},
		{
			name: "a mount flag the plugin adds is not judged, one it drops is",
			req:  asking(flagged),
			resp: &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: confirmed(func() *csipb.VolumeCapability {
				c := mountCap("ext4", csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
				c.GetMount().MountFlags = []string{"nodev", "noatime", "nosuid"}
				return c
			}())},
			want: csi.Validation{Confirmed: true},
		},
		{
			name: "a mount flag dropped among others kept",
			req:  asking(flagged),
			resp: &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: confirmed(func() *csipb.VolumeCapability {
				c := mountCap("ext4", csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
				c.GetMount().MountFlags = []string{"nodev", "nosuid"}
				return c
			}())},
			wantErr: []string{`mount_flags sent as "noatime,nodev", confirmed as "nodev,nosuid": noatime dropped`},
		},
		{
			name: "confirmed by the access mode alone, no access type: accepted with a note",
			req:  asking(flagged, block),
			resp: &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: confirmed(
				&csipb.VolumeCapability{AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}})},
			want: csi.Validation{Confirmed: true, Notes: []string{
				"volume_capabilities[0] (mount(fs_type=ext4 mount_flags=noatime,nodev) SINGLE_NODE_WRITER): confirmed by its access mode alone, without an access type, so its mount was not checked",
				"volume_capabilities[1] (block SINGLE_NODE_WRITER): confirmed by its access mode alone, without an access type, so its block was not checked",
			}},
		},
		{
			name: "a full confirmation is preferred to one without access type (no note)",
			req:  asking(rw),
			resp: &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: confirmed(
				&csipb.VolumeCapability{AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}, rw)},
			want: csi.Validation{Confirmed: true},
		},
		{
			name: "no access type, with a volume_mount_group sent: newer than CSI 1.0, so maybe dropped",
			req:  asking(grouped),
			resp: &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: confirmed(
				&csipb.VolumeCapability{AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}})},
			wantErr: []string{`field volume_capabilities[0].mount.volume_mount_group sent as "1000", dropped from the confirmation`},
		},
		{
			name: "an empty confirmed is no confirmation (the spec: confirmed SHALL be non-empty only on success)",
			req:  request,
			resp: &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: confirmed(), Message: "fs_type xfs is not supported"},
			want: csi.Validation{Message: "fs_type xfs is not supported"},
		},
		{
			name:    "a mismatch carries the plugin's message",
			req:     request,
			resp:    &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: confirmed(rw), Message: "reader mode needs nfs"},
			wantErr: []string{`confirmed as "SINGLE_NODE_WRITER"`, `its message: "reader mode needs nfs"`},
		},
		{
			name:    "block confirmed as mount",
			req:     asking(block),
			resp:    &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: confirmed(rw)},
			wantErr: []string{`field volume_capabilities[0].block sent as "block", confirmed as "mount"`},
		},
		{
			name: "older plugin drops mutable_parameters",
			req: func() *csipb.ValidateVolumeCapabilitiesRequest {
				r := request()
				r.MutableParameters = map[string]string{"iops": "3000"}
				return r
			},
			resp:    &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: confirmed(rw, ro)},
			wantErr: []string{"field mutable_parameters sent (iops), dropped from the confirmation"},
		},
		{
			name: "different parameters echoed",
			req:  request,
			resp: &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{
				VolumeCapabilities: []*csipb.VolumeCapability{rw, ro},
				Parameters:         map[string]string{"tier": "slow", "zone": "a"},
				VolumeContext:      map[string]string{"other": "x"},
			}},
			wantErr: []string{`field parameters["tier"] sent as "fast", confirmed as "slow"`, `field volume_context["path"] sent, dropped`},
		},
		{
			name: "confirmed without capabilities",
			req:  request,
			resp: &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{
				Parameters: map[string]string{"tier": "fast"}}},
			wantErr: []string{"volume_capabilities[0] (mount(fs_type=ext4) SINGLE_NODE_WRITER): not confirmed", "volume_capabilities[1]",
				"it gave no message"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p.ValidateVolumeCapabilities.Next(tc.resp, nil)
			got, err := c.Controller.ValidateVolumeCapabilities(ctx, tc.req())
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				if d := cmp.Diff(tc.want, *got); d != "" {
					t.Fatalf("validation (-want +got):\n%s", d)
				}
				return
			}
			var e *csi.Error
			if !errors.Is(err, csi.ErrConfirmationMismatch) || !errors.As(err, &e) || e.VolumeID != "v1" || !csi.IsFinal(err) {
				t.Fatalf("got %v, %v; want a final ErrConfirmationMismatch about v1", got, err)
			}
			// A refusal of the volume, not berth's fault: 409 at the API.
			if errcode.Code(err) != codes.FailedPrecondition || status.Code(err) != codes.FailedPrecondition {
				t.Errorf("code %s / %s, want FailedPrecondition", errcode.Code(err), status.Code(err))
			}
			for _, s := range tc.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
		})
	}
}
