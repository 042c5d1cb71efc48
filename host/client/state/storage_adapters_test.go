package state

import (
	"errors"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

func TestStorageAdapterRecordsSurviveReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	db := open(t, path)
	rec := &pb.StorageAdapterRecord{Name: "hostpath", Path: "/bin/berth", Args: []string{"builtin", "csi-adapter", "hostpath"},
		ConfigDigest: "abc", Reattach: &pb.PluginReattach{Pid: 42, Network: "unix", Address: "/tmp/x/plugin1"}}
	if err := db.PutStorageAdapter(rec); err != nil {
		t.Fatal(err)
	}
	if err := db.PutStorageAdapter(&pb.StorageAdapterRecord{Name: "tmpdir", Reattach: &pb.PluginReattach{Pid: 7, Address: "/tmp/y"}}); err != nil {
		t.Fatal(err)
	}
	if err := db.PutStorageAdapter(&pb.StorageAdapterRecord{Name: "nopid"}); !errors.Is(err, ErrInvalidRecord) {
		t.Errorf("record without a pid = %v, want ErrInvalidRecord", err)
	}
	if err := db.DeleteStorageAdapter("tmpdir"); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = open(t, path)
	got, err := db.StorageAdapters()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !proto.Equal(got[0], rec) {
		t.Fatalf("after reopen: %v, want only %v", got, rec)
	}
	// Driver plugin records are kept apart: the driver manager never sees
	// (nor forgets) an adapter's record.
	if drv, err := db.DriverPlugins(); err != nil || len(drv) != 0 {
		t.Errorf("DriverPlugins = %v, %v; want none", drv, err)
	}
}
