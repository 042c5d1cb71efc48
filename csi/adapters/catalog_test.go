package adapters

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	builtinadapters "berth.dev/berth/builtin/csi/adapters"
)

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// writeWrapper installs in pluginDir/csi an executable named name that
// serves, through this test binary, the built-in adapter hostpath or a
// fakeAdapter named serves: a third-party adapter.
func writeWrapper(t *testing.T, pluginDir, name, serves string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := CSIDir(pluginDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	args := "builtin csi-adapter " + serves
	if serves != "hostpath" {
		args = "fake-adapter " + serves
	}
	script := "#!/bin/sh\nexec '" + exe + "' " + args + "\n"
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil { // appear whole to a launcher
		t.Fatal(err)
	}
	return path
}

func TestCatalog(t *testing.T) {
	pluginDir := t.TempDir()
	tmpdir := writeWrapper(t, pluginDir, "tmpdir", "tmpdir")
	if err := os.WriteFile(filepath.Join(CSIDir(pluginDir), "notexec"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(CSIDir(pluginDir), ".hidden"), []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}

	// Not dev and no plugin block: hostpath is not offered.
	got, err := Catalog(CatalogConfig{Executable: "/bin/berth", Builtins: builtinadapters.Plugins(), PluginDir: pluginDir})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Adapter{}
	for _, a := range got {
		byName[a.Name] = a
	}
	if _, ok := byName["hostpath"]; ok || len(got) != 2 {
		t.Errorf("catalog without dev: %+v", got)
	}
	if a := byName["tmpdir"]; a.Path != tmpdir || a.Builtin || a.Err != nil {
		t.Errorf("tmpdir: %+v", a)
	}
	if a := byName["notexec"]; !errors.Is(a.Err, ErrAdapterNotExecutable) {
		t.Errorf("notexec: %+v", a)
	}

	// Dev mode offers hostpath as a built-in, with its arguments.
	got, _ = Catalog(CatalogConfig{Executable: "/bin/berth", Builtins: builtinadapters.Plugins(), Dev: true})
	if len(got) != 1 || got[0].Name != "hostpath" || !got[0].Builtin || got[0].Path != "/bin/berth" ||
		strings.Join(got[0].Args, " ") != "builtin csi-adapter hostpath" {
		t.Errorf("dev catalog: %+v", got)
	}

	// Plugin blocks: a config for hostpath, a bad one, a missing adapter.
	got, _ = Catalog(CatalogConfig{Executable: "/bin/berth", Builtins: builtinadapters.Plugins(), PluginDir: pluginDir, Plugins: []PluginConfig{
		{Name: "hostpath", JSON: []byte(`{"capacity": "1GiB", "topology": {"zone": "z1"}}`), Source: "a.hcl:1"},
		{Name: "nfs", Source: "a.hcl:5"},
		{Name: "tmpdir", JSON: []byte(`{"size": 3}`), Source: "a.hcl:9"},
	}})
	byName = map[string]Adapter{}
	for _, a := range got {
		byName[a.Name] = a
	}
	if a := byName["hostpath"]; a.Err != nil || !a.Builtin || string(a.Config) != `{"capacity": "1GiB", "topology": {"zone": "z1"}}` || a.Source != "a.hcl:1" {
		t.Errorf("configured hostpath: %+v", a)
	}
	var ae *AdapterError
	if a := byName["nfs"]; !errors.Is(a.Err, ErrAdapterMissing) || !errors.As(a.Err, &ae) || ae.Source != "a.hcl:5" ||
		a.Path != filepath.Join(CSIDir(pluginDir), "nfs") || !contains(a.Err.Error(), "a.hcl:5") {
		t.Errorf("missing nfs: %+v", a)
	}
	// A third-party adapter's config is its own business: passed as is.
	if a := byName["tmpdir"]; a.Err != nil || string(a.Config) != `{"size": 3}` {
		t.Errorf("tmpdir: %+v", a)
	}

	got, _ = Catalog(CatalogConfig{Executable: "/bin/berth", Builtins: builtinadapters.Plugins(), Plugins: []PluginConfig{
		{Name: "hostpath", JSON: []byte(`{"capacity": "lots"}`), Source: "a.hcl:2"},
	}})
	if len(got) != 1 || !errors.Is(got[0].Err, ErrInvalidConfig) || !contains(got[0].Err.Error(), "capacity") || !contains(got[0].Err.Error(), "a.hcl:2") {
		t.Errorf("bad hostpath config: %+v", got)
	}
}

// TestPluginDirAdapterLaunches: an executable in <plugin_dir>/csi replaces
// the built-in adapter of its name and is launched by its path.
func TestPluginDirAdapterLaunches(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	pluginDir := t.TempDir()
	path := writeWrapper(t, pluginDir, "hostpath", "hostpath")
	cat := e.catalog(pluginDir)
	if len(cat) != 1 || cat[0].Builtin || cat[0].Path != path {
		t.Fatalf("catalog %+v, want the plugin_dir hostpath", cat)
	}
	m := e.newManager(cat, nil)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	h := mustHandle(t, m, "hostpath")
	waitHealthy(t, h)
	checkCSI(ctx, t, h, "node-1")
	if h.Builtin() || h.Path() != path {
		t.Errorf("handle %v %q", h.Builtin(), h.Path())
	}
}

// TestMisnamedAdapterIsRefused: an executable that serves another adapter
// than its name says is refused by name.
func TestMisnamedAdapterIsRefused(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	pluginDir := t.TempDir()
	writeWrapper(t, pluginDir, "other", "hostpath")
	m := e.newManager(e.catalog(pluginDir), nil)
	next := events(t, m, "other")
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ev := expect(t, next, EventStartFailed, EventStarted)
	if !contains(ev.Reason, `calls itself "hostpath"`) {
		t.Errorf("start failure %q", ev.Reason)
	}
	st := mustHandle(t, m, "other").State()
	if st.Running {
		t.Errorf("misnamed adapter running: %+v", st)
	}
}
