package hostvolumes

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"berth.dev/berth/rpc/pb"
)

// A directory there already keeps its mode (what the task made it) when
// a restart restores it or a create is sent again; only a directory mkdir
// made gets the asked mode.
func TestMkdirKeepsAnExistingDirectorysMode(t *testing.T) {
	dir := t.TempDir()
	changes := 0
	m := newManager(t, dir, &changes)
	v := &pb.HostVolume{Id: "v1", Name: "pg", Parameters: map[string]string{"mode": "0755"}}
	path, _, err := m.Create(context.Background(), v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o700); err != nil { // what postgres does
		t.Fatal(err)
	}
	if _, _, err := m.Create(context.Background(), v); err != nil {
		t.Fatal(err)
	}
	m2 := newManager(t, dir, &changes)
	if err := m2.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("the data directory after a re-create and a restore: %v, %v", st.Mode(), err)
	}
}

// Delete of a volume the node has no record of removes only
// <host_volumes_dir>/<id>, never another path the server sent.
func TestMkdirDeleteRemovesOnlyItsDirectory(t *testing.T) {
	dir := t.TempDir()
	changes := 0
	m := newManager(t, dir, &changes)
	precious := filepath.Join(dir, "precious")
	if err := os.MkdirAll(precious, 0o755); err != nil {
		t.Fatal(err)
	}
	err := m.Delete(context.Background(), &pb.HostVolume{Id: "v9", Name: "x", HostPath: precious})
	if !errors.Is(err, ErrBadVolume) {
		t.Fatalf("delete of another path: %v", err)
	}
	if _, err := os.Stat(precious); err != nil {
		t.Fatalf("delete removed %s: %v", precious, err)
	}
	own := filepath.Join(dir, "vols", "v9")
	if err := os.MkdirAll(own, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := m.Delete(context.Background(), &pb.HostVolume{Id: "v9", Name: "x", HostPath: own}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(own); !os.IsNotExist(err) {
		t.Fatalf("its own directory is left: %v", err)
	}
}
