package agent

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

func TestParseHostVolumes(t *testing.T) {
	src := `client {
  enabled = true
  host_volume "scratch" {
    path = "/srv/scratch"
  }
  host_volume "logs" {
    path      = "/var/log/apps"
    read_only = true
  }
}
`
	c, err := ParseConfig("agent.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]*HostVolumeConfig{
		"scratch": {Name: "scratch", Path: "/srv/scratch", Source: "agent.hcl:3:3"},
		"logs":    {Name: "logs", Path: "/var/log/apps", ReadOnly: true, Source: "agent.hcl:6:3"},
	}
	if len(c.Client.HostVolumes) != len(want) {
		t.Fatalf("host volumes %v, want %v", c.Client.HostVolumes, want)
	}
	for name, w := range want {
		if got := c.Client.HostVolumes[name]; got == nil || *got != *w {
			t.Errorf("host volume %q = %+v, want %+v", name, got, w)
		}
	}
	// The JSON syntax reads the same.
	j, err := ParseConfig("agent.json", []byte(`{"client": {"host_volume": {"logs": {"path": "/var/log/apps", "read_only": true}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if hv := j.Client.HostVolumes["logs"]; hv == nil || hv.Path != "/var/log/apps" || !hv.ReadOnly {
		t.Errorf("JSON host volume = %+v", hv)
	}
}

func TestParseHostVolumeErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
		kind            error
	}{
		{"relative path", "client {\n  host_volume \"a\" {\n    path = \"srv/a\"\n  }\n}\n",
			`agent.hcl:3:12: client.host_volume.a.path: "srv/a" is not an absolute path`, ErrInvalidValue},
		{"no path", "client {\n  host_volume \"a\" {\n    read_only = true\n  }\n}\n",
			`agent.hcl:2:3: client.host_volume.a.path: host_volume "a" needs a path: the directory on the node`, ErrInvalidValue},
		{"unknown key", "client {\n  host_volume \"a\" {\n    path = \"/a\"\n    readonly = true\n  }\n}\n",
			`agent.hcl:4:5: unknown key "readonly" in host_volume "a" block (did you mean "read_only"?)`, ErrUnknownKey},
		{"wrong type", "client {\n  host_volume \"a\" {\n    path = \"/a\"\n    read_only = \"no\"\n  }\n}\n",
			`agent.hcl:4:17: client.host_volume.a.read_only: bool required, got string`, ErrWrongType},
		{"twice", "client {\n  host_volume \"a\" {\n    path = \"/a\"\n  }\n  host_volume \"a\" {\n    path = \"/b\"\n  }\n}\n",
			`agent.hcl:5:3: duplicate host_volume "a" block (first defined at agent.hcl:2:3)`, ErrDuplicateBlock},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig("agent.hcl", []byte(tc.src))
			if err == nil || err.Error() != tc.want {
				t.Fatalf("error:\n got: %v\nwant: %s", err, tc.want)
			}
			if !errors.Is(err, tc.kind) {
				t.Errorf("%v does not wrap %v", err, tc.kind)
			}
		})
	}
}

// A later file's host_volume of the same name replaces the earlier one;
// others are kept.
func TestMergeHostVolumes(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.hcl")
	b := filepath.Join(dir, "b.hcl")
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(a, "client {\n  host_volume \"x\" {\n    path = \"/x\"\n  }\n  host_volume \"y\" {\n    path = \"/y\"\n  }\n}\n")
	write(b, "client {\n  host_volume \"x\" {\n    path = \"/x2\"\n    read_only = true\n  }\n}\n")
	c, err := LoadConfigFiles([]string{a, b})
	if err != nil {
		t.Fatal(err)
	}
	x, y := c.Client.HostVolumes["x"], c.Client.HostVolumes["y"]
	if x == nil || x.Path != "/x2" || !x.ReadOnly || y == nil || y.Path != "/y" {
		t.Fatalf("merged host volumes x=%+v y=%+v", x, y)
	}
	cp := c.Copy()
	cp.Client.HostVolumes["x"].Path = "/changed"
	if c.Client.HostVolumes["x"].Path != "/x2" {
		t.Error("Copy shares host volumes with the original")
	}
}

// The agent refuses to start with a host volume whose path is not a
// directory, naming the block, its place and the path.
func TestHostVolumeInfosCheckThePaths(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	c.Client.HostVolumes = map[string]*HostVolumeConfig{
		"ok":      {Name: "ok", Path: dir},
		"missing": {Name: "missing", Path: filepath.Join(dir, "nope"), Source: "agent.hcl:3:3"},
		"file":    {Name: "file", Path: file},
	}
	_, err := c.HostVolumeInfos()
	if !errors.Is(err, ErrHostVolumePath) {
		t.Fatalf("error %v does not wrap ErrHostVolumePath", err)
	}
	for _, want := range []string{
		`agent.hcl:3:3: host_volume "missing": path "` + filepath.Join(dir, "nope") + `": host volume path missing: it does not exist`,
		`host_volume "file": path "` + file + `": host volume path missing: not a directory`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	delete(c.Client.HostVolumes, "missing")
	delete(c.Client.HostVolumes, "file")
	c.Client.HostVolumes["ro"] = &HostVolumeConfig{Name: "ro", Path: dir, ReadOnly: true}
	infos, err := c.HostVolumeInfos()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]*pb.HostVolumeInfo{"ok": {Path: dir}, "ro": {Path: dir, ReadOnly: true}}
	for name, w := range want {
		if !proto.Equal(infos[name], w) {
			t.Errorf("%s = %v, want %v", name, infos[name], w)
		}
	}
	if len(infos) != len(want) {
		t.Errorf("infos %v", infos)
	}
}

func TestValidateHostVolumes(t *testing.T) {
	c := DevConfig()
	c.Client.HostVolumes = map[string]*HostVolumeConfig{"a": {Name: "a", Path: "rel"}}
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), `client.host_volume.a.path: "rel" is not an absolute path`) {
		t.Fatalf("Validate = %v", err)
	}
}
