//go:build linux

package adapters

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"berth.dev/berth/sdk"
)

func TestHostpathConfig(t *testing.T) {
	env := sdk.StorageEnv{
		Config:  json.RawMessage(`{"capacity": "1GiB", "max_volume_size": "100GiB", "max_volumes": 4, "topology": {"zone": "z1"}, "mode": "node"}`),
		NodeID:  "7cdfacfd-234b-46f9-867d-b7c770f60f16",
		DataDir: "/data/csi/adapters/hostpath",
	}
	cfg, err := hostpathServicesConfig(env)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Capacity != 1<<30 || cfg.MaxVolumeSize != 100<<30 || cfg.MaxVolumes != 4 || cfg.Mode != "node" || cfg.NodeID != env.NodeID ||
		cfg.StateDir != filepath.Join(env.DataDir, "state") || !reflect.DeepEqual(cfg.Topology, map[string]string{"zone": "z1"}) {
		t.Errorf("config %+v", cfg)
	}
	// A number of bytes is a capacity too; the node name stands in for a
	// missing node ID; state_dir overrides the data dir.
	cfg, err = hostpathServicesConfig(sdk.StorageEnv{Config: json.RawMessage(`{"capacity": 4096, "state_dir": "/srv/hp"}`), NodeName: "n1", DataDir: "/d"})
	if err != nil || cfg.Capacity != 4096 || cfg.NodeID != "n1" || cfg.StateDir != "/srv/hp" {
		t.Errorf("config %+v, %v", cfg, err)
	}
	if _, err := hostpathServicesConfig(sdk.StorageEnv{Config: json.RawMessage(`{}`), NodeID: "n"}); err == nil {
		t.Error("no state_dir and no data dir accepted")
	}
}

func TestCheckConfigNamesTheKey(t *testing.T) {
	for cfg, want := range map[string]string{
		`{"capacityy": "1G"}`:         `unknown field "capacityy"`,
		`{"capacity": "lots"}`:        "capacity",
		`{"capacity": -1}`:            "capacity: must not be negative",
		`{"max_volumes": "x"}`:        "max_volumes",
		`{"max_volume_size": 0}`:      "max_volume_size: must be more than 0 bytes",
		`{"max_volume_size": "8EiB"}`: "max_volume_size",
	} {
		err := CheckConfig(HostpathName, []byte(cfg))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckConfig(%s) = %v, want %q", cfg, err, want)
		}
	}
	if err := CheckConfig(HostpathName, []byte(`{"capacity": "10GiB", "topology": {"zone": "a"}}`)); err != nil {
		t.Errorf("valid config refused: %v", err)
	}
	if err := CheckConfig("ceph", nil); err == nil || !strings.Contains(err.Error(), "built in: hostpath") {
		t.Errorf("CheckConfig(ceph) = %v", err)
	}
	if got := strings.Join(Args(HostpathName), " "); got != "builtin csi-adapter hostpath" {
		t.Errorf("Args = %q", got)
	}
}
