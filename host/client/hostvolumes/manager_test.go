package hostvolumes

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

func TestSentinelsCarryTheirCodes(t *testing.T) {
	testutil.CheckSentinelCodes(t, map[error]codes.Code{
		ErrUnknownPlugin:  codes.FailedPrecondition,
		ErrPluginFailed:   codes.Internal,
		ErrBadParameters:  codes.InvalidArgument,
		ErrNameTaken:      codes.AlreadyExists,
		ErrBadVolume:      codes.InvalidArgument,
		ErrNotRecorded:    codes.Aborted,
		ErrPluginTimeout:  codes.DeadlineExceeded,
		ErrPluginCanceled: codes.Canceled,
	})
}

func newManager(t *testing.T, dir string, changed *int) *Manager {
	t.Helper()
	m, err := New(Config{StateFile: filepath.Join(dir, "state.json"), VolumesDir: filepath.Join(dir, "vols"),
		PluginDir: filepath.Join(dir, "plugins"), NodeID: "node-1",
		Static:  map[string]*pb.HostVolumeInfo{"static": {Path: "/srv"}},
		Changed: func() { *changed++ }})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// mkdir makes <host_volumes_dir>/<id> with the asked mode, records it,
// fingerprints it, survives a restart (made again), and delete removes
// the directory and the record.
func TestMkdirCreateRestoreDelete(t *testing.T) {
	dir := t.TempDir()
	changes := 0
	m := newManager(t, dir, &changes)
	v := &pb.HostVolume{Id: "v1", Name: "data", Parameters: map[string]string{"mode": "0750", "uid": "0", "gid": "0"}}
	path, n, err := m.Create(context.Background(), v)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(dir, "vols", "v1")
	if path != want || n != 0 {
		t.Fatalf("created %s (%d bytes), want %s", path, n, want)
	}
	st, err := os.Stat(want)
	if err != nil || !st.IsDir() || st.Mode().Perm() != 0o750 {
		t.Fatalf("the volume's directory: %v, %v", st, err)
	}
	if changes != 1 {
		t.Errorf("%d changes reported, want 1", changes)
	}
	if got := m.Volumes()["data"]; got.GetPath() != want || got.GetId() != "v1" || got.GetReadOnly() {
		t.Errorf("fingerprint %v", m.Volumes())
	}
	// Idempotent.
	if p, _, err := m.Create(context.Background(), v); err != nil || p != want {
		t.Fatalf("create again: %s, %v", p, err)
	}

	// A restarted client knows it and makes it again (a reboot lost it).
	if err := os.Remove(want); err != nil {
		t.Fatal(err)
	}
	m2 := newManager(t, dir, &changes)
	if err := m2.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(want); err != nil {
		t.Fatalf("not made again at restore: %v", err)
	}
	if got := m2.Volumes()["data"]; got.GetId() != "v1" {
		t.Fatalf("restored fingerprint %v", m2.Volumes())
	}

	if err := m2.Delete(context.Background(), v); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(want); !os.IsNotExist(err) {
		t.Fatalf("directory left after delete: %v", err)
	}
	if len(m2.Volumes()) != 0 {
		t.Fatalf("fingerprint after delete %v", m2.Volumes())
	}
	m3 := newManager(t, dir, &changes)
	if len(m3.Volumes()) != 0 {
		t.Fatalf("a deleted volume came back from the state file: %v", m3.Volumes())
	}
	// Deleting a volume the node does not have is done.
	if err := m3.Delete(context.Background(), v); err != nil {
		t.Fatal(err)
	}
}

func TestCreateRefusals(t *testing.T) {
	dir := t.TempDir()
	changes := 0
	m := newManager(t, dir, &changes)
	ctx := context.Background()
	if _, _, err := m.Create(ctx, &pb.HostVolume{Id: "v1", Name: "data"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		v    *pb.HostVolume
		want error
		text string
	}{
		{&pb.HostVolume{Id: "v2", Name: "data"}, ErrNameTaken, `host volume "data" (v2) on node node-1, plugin "mkdir": the node has a host volume of that name: dynamic host volume v1`},
		{&pb.HostVolume{Id: "v3", Name: "static"}, ErrNameTaken, "a static host_volume"},
		{&pb.HostVolume{Id: "../x", Name: "x"}, ErrBadVolume, "not one path segment"},
		{&pb.HostVolume{Id: "v4", Name: "x", Parameters: map[string]string{"mode": "rwx"}}, ErrBadParameters, `mode "rwx"`},
		{&pb.HostVolume{Id: "v5", Name: "x", Parameters: map[string]string{"size": "1"}}, ErrBadParameters, `not "size"`},
		{&pb.HostVolume{Id: "v6", Name: "x", PluginId: "nope"}, ErrUnknownPlugin, `host volume "x" (v6) on node node-1, plugin "nope"`},
		{&pb.HostVolume{Id: "v7", Name: "x", PluginId: "../bin/sh"}, ErrUnknownPlugin, "not a plugin name"},
	} {
		_, _, err := m.Create(ctx, tc.v)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("create %v: %v, want %v saying %q", tc.v, err, tc.want, tc.text)
		}
	}
}

// An external plugin gets the contract's arguments and environment and
// answers JSON; a failure carries its stderr and names the plugin.
func TestExternalPlugin(t *testing.T) {
	dir := t.TempDir()
	plugins := filepath.Join(dir, "plugins")
	if err := os.MkdirAll(plugins, 0o755); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "calls")
	script := `#!/bin/sh
echo "$1 op=$DHV_OPERATION id=$DHV_VOLUME_ID name=$DHV_VOLUME_NAME node=$DHV_NODE_ID min=$DHV_CAPACITY_MIN_BYTES max=$DHV_CAPACITY_MAX_BYTES params=$DHV_PARAMETERS path=$DHV_HOST_PATH created=$DHV_CREATED_PATH" >> ` + log + `
case "$1" in
fingerprint) echo '{"version": "0.1.0"}' ;;
create) if [ "$DHV_VOLUME_NAME" = bad ]; then echo "disk on fire" >&2; exit 3; fi
  mkdir -p "$DHV_HOST_PATH" && echo "{\"path\": \"$DHV_HOST_PATH\", \"bytes\": 4096}" ;;
delete) rm -rf "$DHV_CREATED_PATH" ;;
esac
`
	if err := os.WriteFile(filepath.Join(plugins, "ext"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	changes := 0
	m := newManager(t, dir, &changes)
	ctx := context.Background()
	v := &pb.HostVolume{Id: "v1", Name: "data", PluginId: "ext", RequestedCapacityMinBytes: 1024, RequestedCapacityMaxBytes: 8192,
		Parameters: map[string]string{"fs": "ext4"}}
	path, n, err := m.Create(ctx, v)
	want := filepath.Join(dir, "vols", "v1")
	if err != nil || path != want || n != 4096 {
		t.Fatalf("create: %s, %d, %v", path, n, err)
	}
	if err := m.Delete(ctx, v); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(want); !os.IsNotExist(err) {
		t.Fatalf("the plugin's delete left %s: %v", want, err)
	}
	p, err := lookupPlugin("ext", plugins, filepath.Join(dir, "vols"))
	if err != nil {
		t.Fatal(err)
	}
	if ver, err := p.(*External).Fingerprint(ctx); err != nil || ver != "0.1.0" {
		t.Fatalf("fingerprint %q, %v", ver, err)
	}
	calls, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		`create op=create id=v1 name=data node=node-1 min=1024 max=8192 params={"fs":"ext4"} path=` + want + " created=\n",
		`delete op=delete id=v1 name=data node=node-1 min=1024 max=8192 params={"fs":"ext4"} path=` + want + " created=" + want + "\n",
		"fingerprint op=fingerprint",
	} {
		if !strings.Contains(string(calls), w) {
			t.Errorf("the plugin's calls\n%s\nlack %q", calls, w)
		}
	}

	_, _, err = m.Create(ctx, &pb.HostVolume{Id: "v2", Name: "bad", PluginId: "ext"})
	if !errors.Is(err, ErrPluginFailed) || !strings.Contains(err.Error(), `host volume "bad" (v2) on node node-1, plugin "ext": create:`) ||
		!strings.Contains(err.Error(), "exit status 3: disk on fire") {
		t.Fatalf("failed create: %v", err)
	}
	if _, ok := m.Volumes()["bad"]; ok {
		t.Fatal("a failed create is fingerprinted")
	}
}
