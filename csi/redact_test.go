package csi_test

import (
	"context"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/csi"
)

const secret = "hunter2-topsecret"

// TestSecretsNeverLogged runs calls carrying secrets through a trace-level
// logger and a plugin that echoes the secret in its error, then checks
// neither the log nor the errors hold it.
func TestSecretsNeverLogged(t *testing.T) {
	logs, logger := newCaptureLogger(t)
	p, _, c := startFake(t, csi.WithLogger(logger))
	ctx := testCtx(t)
	secrets := map[string]string{"password": secret, "user": "admin-" + secret}

	p.NodeStageVolume.Next(nil, status.Error(codes.PermissionDenied, "login admin-"+secret+" refused"))
	_, stageErr := c.Node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
		VolumeId: "v1", StagingTargetPath: "/s", VolumeCapability: rwCap, Secrets: secrets,
	})
	p.ControllerPublishVolume.Always(nil, status.Error(codes.Unavailable, "backend said "+secret))
	r := csi.Retry{MaxAttempts: 2, Clock: instantClock{}, Logger: logger}
	pubErr := r.Do(ctx, csi.CallControllerPublishVolume, "v1", func(ctx context.Context) error {
		_, err := c.Controller.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{
			VolumeId: "v1", NodeId: "n1", VolumeCapability: rwCap, Secrets: secrets,
		})
		return err
	})
	p.ValidateVolumeCapabilities.Next(&csipb.ValidateVolumeCapabilitiesResponse{Message: "bad secret " + secret}, nil)
	v, err := c.Controller.ValidateVolumeCapabilities(ctx, &csipb.ValidateVolumeCapabilitiesRequest{
		VolumeId: "v1", VolumeCapabilities: []*csipb.VolumeCapability{rwCap}, Secrets: secrets,
	})
	if err != nil {
		t.Fatal(err)
	}

	if stageErr == nil || pubErr == nil {
		t.Fatalf("scripted failures did not fail: %v, %v", stageErr, pubErr)
	}
	for what, s := range map[string]string{
		"stage error": stageErr.Error(), "publish error": pubErr.Error(),
		"validation message": v.Message, "log": logs.String(),
	} {
		if strings.Contains(s, secret) {
			t.Errorf("%s holds the secret: %s", what, s)
		}
		if !strings.Contains(s, csi.Redacted) {
			t.Errorf("%s does not show where a secret was removed: %s", what, s)
		}
	}
	log := logs.String()
	// The request was logged, with the names of the secrets but not their values.
	for _, want := range []string{"call=NodeStageVolume", "volume=v1", "password", "attempt=1", "call=ControllerPublishVolume"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q", want)
		}
	}
	// The plugin got the secrets intact.
	if got := p.NodeStageVolume.Last().GetSecrets()["password"]; got != secret {
		t.Errorf("plugin received password %q", got)
	}
}

// TestRedactEverySecretField covers each request the spec gives secrets.
func TestRedactEverySecretField(t *testing.T) {
	s := func() map[string]string { return map[string]string{"token": secret} }
	msgs := []interface {
		proto.Message
		GetSecrets() map[string]string
	}{
		&csipb.CreateVolumeRequest{Name: "v1", Secrets: s()},
		&csipb.DeleteVolumeRequest{VolumeId: "v1", Secrets: s()},
		&csipb.ControllerPublishVolumeRequest{VolumeId: "v1", Secrets: s()},
		&csipb.ControllerUnpublishVolumeRequest{VolumeId: "v1", Secrets: s()},
		&csipb.ValidateVolumeCapabilitiesRequest{VolumeId: "v1", Secrets: s()},
		&csipb.ListSnapshotsRequest{Secrets: s()},
		&csipb.CreateSnapshotRequest{Name: "s1", Secrets: s()},
		&csipb.DeleteSnapshotRequest{SnapshotId: "s1", Secrets: s()},
		&csipb.GetSnapshotRequest{SnapshotId: "s1", Secrets: s()},
		&csipb.ControllerExpandVolumeRequest{VolumeId: "v1", Secrets: s()},
		&csipb.ControllerModifyVolumeRequest{VolumeId: "v1", Secrets: s()},
		&csipb.NodeStageVolumeRequest{VolumeId: "v1", Secrets: s()},
		&csipb.NodePublishVolumeRequest{VolumeId: "v1", Secrets: s()},
		&csipb.NodeExpandVolumeRequest{VolumeId: "v1", Secrets: s()},
	}
	for _, m := range msgs {
		name := string(m.ProtoReflect().Descriptor().Name())
		red := csi.Redact(m).(interface{ GetSecrets() map[string]string })
		if got := red.GetSecrets()["token"]; got != csi.Redacted {
			t.Errorf("%s: redacted token is %q", name, got)
		}
		if txt := csi.RedactedString(m); strings.Contains(txt, secret) || !strings.Contains(txt, "token") {
			t.Errorf("%s: redacted text %s", name, txt)
		}
		if m.GetSecrets()["token"] != secret {
			t.Errorf("%s: Redact changed the original", name)
		}
	}
	// Non-secret fields survive.
	red := csi.Redact(&csipb.NodeStageVolumeRequest{VolumeId: "v1", PublishContext: map[string]string{"dev": "/dev/sdb"}, Secrets: s()}).(*csipb.NodeStageVolumeRequest)
	if red.GetVolumeId() != "v1" || red.GetPublishContext()["dev"] != "/dev/sdb" {
		t.Errorf("Redact lost non-secret fields: %v", red)
	}
	if csi.Redact(nil) != nil || csi.RedactedString(nil) != "" {
		t.Error("Redact(nil) must be nil")
	}
}

func FuzzRedact(f *testing.F) {
	seed, _ := proto.Marshal(&csipb.NodeStageVolumeRequest{VolumeId: "v1", Secrets: map[string]string{"a": "b"}})
	f.Add(seed)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var m csipb.NodeStageVolumeRequest
		if proto.Unmarshal(data, &m) != nil {
			return
		}
		red := csi.Redact(&m).(*csipb.NodeStageVolumeRequest)
		if len(red.GetSecrets()) != len(m.GetSecrets()) {
			t.Fatalf("secret keys changed: %d -> %d", len(m.GetSecrets()), len(red.GetSecrets()))
		}
		for k, v := range red.GetSecrets() {
			if v != csi.Redacted {
				t.Fatalf("secret %q kept value %q", k, v)
			}
		}
		if red.GetVolumeId() != m.GetVolumeId() {
			t.Fatalf("volume id changed")
		}
	})
}
