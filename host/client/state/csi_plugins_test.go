package state

import (
	"errors"
	"testing"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

func csiReg(typ pb.CSIPluginType, pluginID, allocID string) *pb.CSIPluginRegistration {
	return &pb.CSIPluginRegistration{
		Type: typ, PluginId: pluginID, AllocId: allocID,
		Endpoint: "unix:///data/csi/plugins/" + allocID + "/csi.sock",
		Provider: "hostpath.csi.berth.dev", ProviderVersion: "1.0.0",
		RegisteredAt: 5, Healthy: true, AllocCreateIndex: 12,
	}
}

const (
	csiController = pb.CSIPluginType_CSI_PLUGIN_TYPE_CONTROLLER
	csiNode       = pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE
)

func TestCSIPluginRegistrationsSurviveReopen(t *testing.T) {
	path := Path(t.TempDir())
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	// A plugin ID with '/' in it must not collide with another alloc's key.
	if err := db.PutCSIPluginRegistrations(
		csiReg(csiController, "hostpath", "a1"), csiReg(csiNode, "hostpath", "a1"),
		csiReg(csiNode, "x/a1/hostpath", "a2"),
	); err != nil {
		t.Fatal(err)
	}
	replaced := csiReg(csiNode, "hostpath", "a1")
	replaced.Healthy, replaced.HealthDescription = false, "probe: not ready"
	if err := db.PutCSIPluginRegistrations(replaced); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db = open(t, path)
	got, err := db.CSIPluginRegistrations()
	if err != nil {
		t.Fatal(err)
	}
	want := []*pb.CSIPluginRegistration{
		csiReg(csiController, "hostpath", "a1"), // keys sort by type, then alloc, then plugin
		replaced,
		csiReg(csiNode, "x/a1/hostpath", "a2"),
	}
	if len(got) != len(want) {
		t.Fatalf("got %d registrations, want %d: %v", len(got), len(want), got)
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("registration %d = %v, want %v", i, got[i], want[i])
		}
	}

	// Deleting names records by their key fields; a missing one is fine.
	if err := db.DeleteCSIPluginRegistrations(
		&pb.CSIPluginRegistration{Type: csiController, PluginId: "hostpath", AllocId: "a1"},
		&pb.CSIPluginRegistration{Type: csiNode, PluginId: "hostpath", AllocId: "a1"},
		&pb.CSIPluginRegistration{Type: csiNode, PluginId: "gone", AllocId: "a9"},
	); err != nil {
		t.Fatal(err)
	}
	got, err = db.CSIPluginRegistrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].GetPluginId() != "x/a1/hostpath" || got[0].GetAllocId() != "a2" {
		t.Fatalf("after delete: %v, want only x/a1/hostpath of a2", got)
	}
}

func TestCSIPluginRegistrationsRefuseBadKeysAtomically(t *testing.T) {
	db := open(t, Path(t.TempDir()))
	for _, bad := range []*pb.CSIPluginRegistration{
		csiReg(pb.CSIPluginType_CSI_PLUGIN_TYPE_MONOLITH, "hostpath", "a1"),
		csiReg(pb.CSIPluginType_CSI_PLUGIN_TYPE_UNSPECIFIED, "hostpath", "a1"),
		csiReg(csiNode, "", "a1"),
		csiReg(csiNode, "hostpath", ""),
		csiReg(csiNode, "hostpath", "a/1"),
	} {
		// The good record next to the bad one must not be stored either.
		err := db.PutCSIPluginRegistrations(csiReg(csiController, "ok", "a0"), bad)
		if !errors.Is(err, ErrInvalidRecord) {
			t.Errorf("put %v: err = %v, want ErrInvalidRecord", bad, err)
		}
		if err := db.DeleteCSIPluginRegistrations(bad); !errors.Is(err, ErrInvalidRecord) {
			t.Errorf("delete %v: err = %v, want ErrInvalidRecord", bad, err)
		}
	}
	got, err := db.CSIPluginRegistrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("a refused put stored %v", got)
	}
}

func TestCSIPluginRegistrationsReportUndecodable(t *testing.T) {
	db := open(t, Path(t.TempDir()))
	if err := db.PutCSIPluginRegistrations(csiReg(csiNode, "hostpath", "a1")); err != nil {
		t.Fatal(err)
	}
	if err := db.bolt.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketCSIPlugins).Put([]byte("node/a2/broken"), []byte{0xff, 0xff})
	}); err != nil {
		t.Fatal(err)
	}
	got, err := db.CSIPluginRegistrations()
	var rerr *RecordError
	if !errors.As(err, &rerr) || rerr.Bucket != "csi_plugins" || rerr.Key != "node/a2/broken" {
		t.Fatalf("err = %v, want a *RecordError naming csi_plugins and node/a2/broken", err)
	}
	if len(got) != 1 || got[0].GetAllocId() != "a1" {
		t.Fatalf("good records = %v, want the one of a1", got)
	}
}
