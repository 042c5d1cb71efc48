package ctrdriver

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

func absentSocketConfig(t *testing.T) *driverpb.PluginConfig {
	return &driverpb.PluginConfig{Values: sdk.ConfigMap{"address": sdk.StringValue(filepath.Join(t.TempDir(), "none.sock"))}}
}

// A client SetConfig replaced is closed once nothing holds it: at once
// when no task does, else when the last task holding it is destroyed.
func TestReplacedClientIsClosedWhenUnused(t *testing.T) {
	d := New(hclog.NewNullLogger())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.SetConfig(ctx, absentSocketConfig(t)); err != nil {
		t.Fatal(err)
	}
	first := d.client
	if err := d.SetConfig(ctx, absentSocketConfig(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Version(ctx); err == nil || !strings.Contains(err.Error(), "closing") {
		t.Errorf("replaced client with no holder: Version gave %v, want a closed connection", err)
	}
	second, _, release := d.hold() // as a task started through it holds it
	if err := d.SetConfig(ctx, absentSocketConfig(t)); err != nil {
		t.Fatal(err)
	}
	vctx, vcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err := second.Version(vctx)
	vcancel()
	if err != nil && strings.Contains(err.Error(), "closing") {
		t.Errorf("replaced client a task still holds was closed: %v", err)
	}
	release()
	if _, err := second.Version(ctx); err == nil || !strings.Contains(err.Error(), "closing") {
		t.Errorf("replaced client after its last holder went: Version gave %v, want a closed connection", err)
	}
}

// A probe of a replaced config that ends after the new config's first
// probe does not overwrite the new health.
func TestStaleProbeDoesNotOverwriteHealth(t *testing.T) {
	d := New(hclog.NewNullLogger())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.SetConfig(ctx, absentSocketConfig(t)); err != nil {
		t.Fatal(err)
	}
	stale := d.gen
	if err := d.SetConfig(ctx, absentSocketConfig(t)); err != nil {
		t.Fatal(err)
	}
	if !d.setFingerprint(d.gen, &driverpb.DriverFingerprint{Health: driverpb.Health_HEALTH_HEALTHY, HealthDescription: "new"}) {
		t.Fatal("the current config's fingerprint was not published")
	}
	if d.setFingerprint(stale, &driverpb.DriverFingerprint{Health: driverpb.Health_HEALTH_UNHEALTHY, HealthDescription: "stale"}) {
		t.Error("a replaced config's probe published its fingerprint")
	}
	if got := d.fp.Current().GetHealthDescription(); got != "new" {
		t.Errorf("fingerprint %q, want the current config's", got)
	}
}
