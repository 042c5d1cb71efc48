package server

import (
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// A create the plugin refuses for its size reaches the API as the plugin's
// code, a 4xx whose message names the volume, the plugin, the node and the
// plugin's own words (the limit), never a 500: OutOfRange (above the
// largest volume it makes) is 400, ResourceExhausted (no room) 409. Nothing
// is registered.
func TestVolumeCreateTooLargeIsAClientError(t *testing.T) {
	p := csifake.New()
	_, s, vols, n, _ := volumeCluster(t, p)
	for _, tc := range []struct {
		code    codes.Code
		message string
		http    int
	}{
		{codes.OutOfRange, `volume "huge": 109951162777600 bytes (100TiB) is more than the largest volume this plugin makes, 1099511627776 bytes (1TiB, its max_volume_size)`, http.StatusBadRequest},
		{codes.ResourceExhausted, `volume "huge" needs 536870912000 bytes (500GiB) but the filesystem of the plugin's state directory /d has only 80530636800 bytes (75GiB) free`, http.StatusConflict},
	} {
		p.CreateVolume.Next(nil, status.Error(tc.code, tc.message))
		v := fsVolume("huge")
		v.ExternalId = ""
		v.RequestedCapacityMinBytes = 100 << 40
		_, err := vols.Create(ctx10s(t), &pb.VolumeCreateRequest{Volume: v})
		st := status.Convert(err)
		if st.Code() != tc.code || errcode.HTTPStatus(st.Code()) != tc.http {
			t.Fatalf("create refused with %v: got %v (HTTP %d), want %v (HTTP %d)", tc.code, err, errcode.HTTPStatus(st.Code()), tc.code, tc.http)
		}
		for _, want := range []string{`volume "huge"`, `plugin "hp"`, n.GetId(), tc.message} {
			if !strings.Contains(st.Message(), want) {
				t.Errorf("message %q does not name %q", st.Message(), want)
			}
		}
		if got, _ := s.fsm.State().VolumeByID(nil, "huge"); got != nil {
			t.Errorf("refused volume registered: %v", got)
		}
	}
	if got := p.CreateVolume.Count(); got != 2 {
		t.Errorf("%d CreateVolume calls, want 2: a refusal for size is final, not retried", got)
	}
}
