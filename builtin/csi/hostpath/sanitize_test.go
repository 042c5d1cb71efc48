package hostpath

import (
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// A request with string maps that are not secrets (volume_context,
// publish_context) next to secrets must render without panicking, keep the
// plain maps and hide the secrets.
func TestSanitizeKeepsPlainMapsAndHidesSecrets(t *testing.T) {
	req := &csi.NodeStageVolumeRequest{
		VolumeId:          "vol-1",
		StagingTargetPath: "/staging/vol-1",
		PublishContext:    map[string]string{"node": "n1"},
		VolumeContext:     map[string]string{"pool": "p1"},
		Secrets:           map[string]string{"password": "hunter2"},
	}
	got := sanitize(req)
	for _, want := range []string{`"pool":"p1"`, `"node":"n1"`, `"password":"***"`} {
		if !strings.Contains(strings.ReplaceAll(got, " ", ""), want) {
			t.Errorf("sanitized request lacks %s: %s", want, got)
		}
	}
	if strings.Contains(got, "hunter2") {
		t.Fatalf("secret leaked: %s", got)
	}
	if req.Secrets["password"] != "hunter2" {
		t.Fatal("sanitize changed the caller's request")
	}
}
