package csi_test

import (
	"errors"
	"strings"
	"testing"

	"berth.dev/berth/csi"
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
)

func TestValidateVolumeCapabilities(t *testing.T) {
	p, _, c := startFake(t)
	ctx := testCtx(t)

	rw := mountCap("ext4", csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	ro := mountCap("ext4", csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)
	grouped := mountCap("ext4", csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	grouped.GetMount().VolumeMountGroup = "1000"
	request := func() *csipb.ValidateVolumeCapabilitiesRequest {
		return &csipb.ValidateVolumeCapabilitiesRequest{
			VolumeId:           "v1",
			VolumeCapabilities: []*csipb.VolumeCapability{rw, ro},
			VolumeContext:      map[string]string{"path": "/srv/v1"},
			Parameters:         map[string]string{"tier": "fast"},
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
		wantErr []string // substrings of an ErrInvalidResponse; nil means no error
	}{
		{
			name: "full echo confirms",
			req:  request,
			resp: &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{
				VolumeCapabilities: []*csipb.VolumeCapability{rw, ro},
				VolumeContext:      map[string]string{"path": "/srv/v1"},
				Parameters:         map[string]string{"tier": "fast"},
			}},
			want: csi.Validation{Confirmed: true},
		},
		{
			name: "capabilities in another order, context and parameters not echoed",
			req:  request,
			resp: &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: confirmed(ro, rw)},
			want: csi.Validation{Confirmed: true},
		},
		{
			name: "absent confirmed is a no with the plugin's message",
			req:  request,
			resp: &csipb.ValidateVolumeCapabilitiesResponse{Message: "MULTI_NODE_READER_ONLY is not supported"},
			want: csi.Validation{Message: "MULTI_NODE_READER_ONLY is not supported"},
		},
		{
			name:    "fewer capabilities echoed",
			req:     request,
			resp:    &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: confirmed(rw)},
			wantErr: []string{"mount(fs_type=ext4) MULTI_NODE_READER_ONLY not confirmed"},
		},
		{
			name: "older plugin drops volume_mount_group",
			req: func() *csipb.ValidateVolumeCapabilitiesRequest {
				return &csipb.ValidateVolumeCapabilitiesRequest{VolumeId: "v1", VolumeCapabilities: []*csipb.VolumeCapability{grouped}}
			},
			resp: &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: confirmed(rw)},
			wantErr: []string{
				"mount(fs_type=ext4 volume_mount_group=1000) SINGLE_NODE_WRITER not confirmed",
				"mount(fs_type=ext4) SINGLE_NODE_WRITER confirmed but not requested",
			},
		},
		{
			name: "older plugin drops mutable_parameters",
			req: func() *csipb.ValidateVolumeCapabilitiesRequest {
				r := request()
				r.MutableParameters = map[string]string{"iops": "3000"}
				return r
			},
			resp:    &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: confirmed(rw, ro)},
			wantErr: []string{"mutable_parameters requested but not confirmed"},
		},
		{
			name: "different parameters echoed",
			req:  request,
			resp: &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{
				VolumeCapabilities: []*csipb.VolumeCapability{rw, ro},
				Parameters:         map[string]string{"tier": "slow", "zone": "a"},
			}},
			wantErr: []string{"parameters confirmed differ from the request in tier, zone"},
		},
		{
			name:    "confirmed without capabilities",
			req:     request,
			resp:    &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: confirmed()},
			wantErr: []string{"SINGLE_NODE_WRITER not confirmed", "MULTI_NODE_READER_ONLY not confirmed"},
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
				if *got != tc.want {
					t.Fatalf("got %+v, want %+v", *got, tc.want)
				}
				return
			}
			var e *csi.Error
			if !errors.Is(err, csi.ErrInvalidResponse) || !errors.As(err, &e) || e.VolumeID != "v1" || !csi.IsFinal(err) {
				t.Fatalf("got %v, %v; want a final ErrInvalidResponse about v1", got, err)
			}
			for _, s := range tc.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
		})
	}
}
