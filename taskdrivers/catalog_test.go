package taskdrivers

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"berth.dev/berth/builtin/drivers"
	"berth.dev/berth/sdk"
)

func names(plugins []Plugin) []string {
	var out []string
	for _, p := range plugins {
		out = append(out, p.Name)
	}
	return out
}

func find(t *testing.T, plugins []Plugin, name string) Plugin {
	t.Helper()
	for _, p := range plugins {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no plugin %q in %v", name, names(plugins))
	return Plugin{}
}

func TestCatalogOffersMockOnlyInDevModeOrWhenConfigured(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     CatalogConfig
		drivers []string
	}{
		{"production", CatalogConfig{Executable: "/usr/bin/berth", Builtins: drivers.Plugins()}, []string{"exec", "raw_exec"}},
		{"dev", CatalogConfig{Executable: "/usr/bin/berth", Builtins: drivers.Plugins(), Dev: true}, []string{"exec", "mock", "raw_exec"}},
		{"configured", CatalogConfig{Executable: "/usr/bin/berth", Builtins: drivers.Plugins(), Plugins: []PluginConfig{{Name: "mock"}}}, []string{"exec", "mock", "raw_exec"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plugins, err := Catalog(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := names(plugins); !slices.Equal(got, tc.drivers) {
				t.Fatalf("drivers %v, want %v", got, tc.drivers)
			}
			for _, p := range plugins {
				if !p.Builtin || p.Path != "/usr/bin/berth" || !slices.Equal(p.Args, []string{"builtin", "driver", p.Name}) || p.Err != nil {
					t.Fatalf("built-in %s: %+v", p.Name, p)
				}
			}
		})
	}
}

func TestCatalogReadsPluginDirAndConfigs(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("thirdparty", 0o755)
	write("noexec", 0o644)
	write(".hidden", 0o755)
	write("raw_exec", 0o755) // replaces the built-in one
	if err := os.Mkdir(filepath.Join(dir, "subdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	plugins, err := Catalog(CatalogConfig{
		Executable: "/usr/bin/berth",
		Builtins:   drivers.Plugins(),
		PluginDir:  dir,
		Plugins: []PluginConfig{
			{Name: "thirdparty", JSON: []byte(`{"socket": "/run/x.sock", "retries": 3}`), Source: "agent.hcl:4"},
			{Name: "ghost", Source: "agent.hcl:9"},
			{Name: "mock", JSON: []byte(`{"attributes": {"a": 1}}`), Source: "agent.hcl:12"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(plugins), []string{"exec", "ghost", "mock", "noexec", "raw_exec", "thirdparty"}; !slices.Equal(got, want) {
		t.Fatalf("drivers %v, want %v", got, want)
	}

	tp := find(t, plugins, "thirdparty")
	if tp.Builtin || tp.Path != filepath.Join(dir, "thirdparty") || len(tp.Args) != 0 || tp.Err != nil || tp.Source != "agent.hcl:4" {
		t.Fatalf("thirdparty: %+v", tp)
	}
	if tp.Config["socket"].GetStringValue() != "/run/x.sock" || tp.Config["retries"].GetIntValue() != 3 {
		t.Fatalf("thirdparty config: %v", tp.Config)
	}
	if re := find(t, plugins, "raw_exec"); re.Builtin || re.Path != filepath.Join(dir, "raw_exec") {
		t.Fatalf("a plugin_dir raw_exec should replace the built-in one: %+v", re)
	}

	var pe *PluginError
	ne := find(t, plugins, "noexec")
	if !errors.Is(ne.Err, ErrPluginNotExecutable) || !errors.As(ne.Err, &pe) || pe.Path != filepath.Join(dir, "noexec") {
		t.Fatalf("noexec: %v", ne.Err)
	}
	gh := find(t, plugins, "ghost")
	if !errors.Is(gh.Err, ErrPluginMissing) || !errors.As(gh.Err, &pe) || pe.Source != "agent.hcl:9" || gh.Path != filepath.Join(dir, "ghost") {
		t.Fatalf("ghost: %+v", gh)
	}
	mk := find(t, plugins, "mock")
	if !errors.Is(mk.Err, sdk.ErrConfigJSON) || !errors.As(mk.Err, &pe) || pe.Name != "mock" || pe.Source != "agent.hcl:12" {
		t.Fatalf("mock config with a non-string map value: %v", mk.Err)
	}
}

func TestCatalogKeepsBuiltinsWhenPluginDirIsUnreadable(t *testing.T) {
	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	plugins, err := Catalog(CatalogConfig{Executable: "/usr/bin/berth", Builtins: drivers.Plugins(), PluginDir: notADir})
	if err == nil {
		t.Fatal("no error for a plugin_dir that is a file")
	}
	if got := names(plugins); !slices.Equal(got, []string{"exec", "raw_exec"}) {
		t.Fatalf("drivers %v, want the built-in ones", got)
	}
	// A plugin_dir that does not exist yet is simply empty.
	plugins, err = Catalog(CatalogConfig{Executable: "/usr/bin/berth", Builtins: drivers.Plugins(), PluginDir: filepath.Join(t.TempDir(), "none")})
	if err != nil || len(plugins) != 2 {
		t.Fatalf("missing plugin_dir: %v, %v", names(plugins), err)
	}
}

// A plugin block with bad config JSON is a config error (fatal, no retry)
// even when its plugin is also missing or not executable.
func TestCatalogKeepsConfigErrorOfMissingPlugin(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "noexec"), []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := []byte(`{"attributes": {"a": 1}}`)
	plugins, err := Catalog(CatalogConfig{
		Executable: "/usr/bin/berth",
		Builtins:   drivers.Plugins(),
		PluginDir:  dir,
		Plugins: []PluginConfig{
			{Name: "ghost", JSON: bad, Source: "agent.hcl:3"},
			{Name: "noexec", JSON: bad, Source: "agent.hcl:7"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, absent := range map[string]error{"ghost": ErrPluginMissing, "noexec": ErrPluginNotExecutable} {
		p := find(t, plugins, name)
		var pe *PluginError
		if !errors.Is(p.Err, sdk.ErrConfigJSON) || !isConfigError(p.Err) || !errors.As(p.Err, &pe) || pe.Name != name || pe.Source != p.Source {
			t.Errorf("%s: %v, want a config error naming the driver and its block", name, p.Err)
		}
		if !errors.Is(p.Err, absent) {
			t.Errorf("%s: %v, want it still to say %v", name, p.Err, absent)
		}
	}
}
