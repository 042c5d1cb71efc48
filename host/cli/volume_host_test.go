package cli

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
)

const hostVolID = "4a0e0000-0000-4000-8000-000000000001"

func (f *fakeCluster) hostVolumeRoutes(route func(string, func(*http.Request) (any, error))) {
	route("GET /v1/volumes/host", func(r *http.Request) (any, error) {
		if err := f.wait(r); err != nil {
			return nil, err
		}
		var vols []*pb.HostVolume
		for _, id := range sortedKeys(f.hostVolumes) {
			if id >= r.URL.Query().Get("next_token") {
				vols = append(vols, f.hostVolumes[id])
			}
		}
		return apijson.MarshalList(vols)
	})
	route("GET /v1/volume/host/{id}", func(r *http.Request) (any, error) {
		return f.readOne(r, "host volume", func() proto.Message { return f.hostVolumes[r.PathValue("id")] })
	})
	route("PUT /v1/volumes/host", func(r *http.Request) (any, error) {
		req := &pb.HostVolumeCreateRequest{}
		if err := decodeReq(r, req); err != nil {
			return nil, err
		}
		v := req.GetVolume()
		v.Id, v.NodeId, v.HostPath = hostVolID, nodeA, "/var/lib/berth/host_volumes/"+hostVolID
		v.State = pb.HostVolumeState_HOST_VOLUME_STATE_READY
		if f.hostVolumes == nil {
			f.hostVolumes = map[string]*pb.HostVolume{}
		}
		f.hostVolumes[v.GetId()] = v
		f.index++
		return &pb.HostVolumeCreateResponse{Volume: v, Index: f.index}, nil
	})
	route("DELETE /v1/volume/host/{id}", func(r *http.Request) (any, error) {
		if f.hostVolumes[r.PathValue("id")] == nil {
			return nil, notFound("host volume", r.PathValue("id"))
		}
		delete(f.hostVolumes, r.PathValue("id"))
		f.index++
		resp := &pb.HostVolumeDeleteResponse{Index: f.index}
		if r.URL.Query().Get("force") == "true" {
			resp.Warning = "host volume forgotten without asking its node: its data may remain there"
		}
		return resp, nil
	})
}

// `volume create` of a type = "host" file sends the dynamic host volume
// (defaults filled in, checked here first), shows it, `volume status`
// lists it beside CSI volumes (type column) and shows it by prefix, and
// `volume delete` deletes it through the host volume API.
func TestHostVolumeCreateStatusDelete(t *testing.T) {
	f := newFakeCluster(t)
	file := filepath.Join(t.TempDir(), "vol.hcl")
	if err := os.WriteFile(file, []byte(`
type = "host"
name = "pg-data"
capability {
  access_mode     = "single-node-single-writer"
  attachment_mode = "file-system"
}
parameters {
  mode = "0750"
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	wantOut(t, []string{"volume", "create", "-address", f.url, file}, 0,
		`Created host volume "pg-data" with ID `+hostVolID+` on node `+nodeA,
		"Plugin ID     = mkdir", "Capabilities  = single-node-single-writer/file-system", "Parameters    = mode=0750")
	f.mu.Lock()
	sent := f.hostVolumes[hostVolID]
	f.mu.Unlock()
	if sent.GetName() != "pg-data" || sent.GetPluginId() != "mkdir" || sent.GetParameters()["mode"] != "0750" {
		t.Fatalf("sent %v", sent)
	}

	out := wantOut(t, []string{"volume", "status", "-address", f.url}, 0, "No volumes", "Dynamic Host Volumes")
	lines := strings.Split(out, "\n")
	i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "ID ") })
	if i < 0 || !slices.Equal(strings.Fields(lines[i]), []string{"ID", "Name", "Type", "Plugin", "ID", "Node", "ID", "State"}) ||
		!slices.Equal(strings.Fields(lines[i+1]), []string{"4a0e0000", "pg-data", "host", "mkdir", "n1n1n1n1", "ready"}) {
		t.Fatalf("volume status:\n%s", out)
	}
	wantOut(t, []string{"volume", "status", "-address", f.url, "-type", "host", "4a0e"}, 0,
		"ID            = "+hostVolID, "Host Path     = /var/lib/berth/host_volumes/"+hostVolID, "State         = ready")
	wantOut(t, []string{"volume", "delete", "-address", f.url, "4a0e"}, 0, "Successfully deleted host volume "+hostVolID)
	wantOut(t, []string{"volume", "status", "-address", f.url, "-type", "host"}, 0, "No dynamic host volumes")
}

// A host volume file's mistakes are reported with file:line:col before
// anything is sent.
func TestHostVolumeFileErrors(t *testing.T) {
	f := newFakeCluster(t)
	file := filepath.Join(t.TempDir(), "vol.hcl")
	if err := os.WriteFile(file, []byte("type = \"host\"\nname = \"a/b\"\nnode_pool = \"x\"\ncapability {\n  access_mode = \"multi-node-multi-writer\"\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, errOut := berth(t, "volume", "create", "-address", f.url, file)
	for _, w := range []string{
		file + `:2:1: name: "a/b" holds '/'`,
		file + ":3:13: node_pool: berth has no node pools",
		file + `:5:3: capability[0].access_mode: a host volume is on one node`,
	} {
		if !strings.Contains(errOut, w) {
			t.Errorf("stderr %q lacks %q", errOut, w)
		}
	}
	if len(f.requests) != 0 {
		t.Errorf("requests sent: %v", f.requests)
	}
}

// An ID names a CSI volume or a host volume: an exact CSI ID wins over a
// host ID prefix; a prefix matching both kinds is refused naming both.
// status -json without -type is the bare array of CSI volumes (as before
// host volumes), -type host -json an array of host volumes; delete -force
// prints the servers' warning.
func TestVolumeIDResolvesAcrossKinds(t *testing.T) {
	f := newFakeCluster(t)
	f.mu.Lock()
	f.hostVolumes = map[string]*pb.HostVolume{hostVolID: {Id: hostVolID, Name: "pg", NodeId: nodeA, State: pb.HostVolumeState_HOST_VOLUME_STATE_READY}}
	if f.volumes == nil {
		f.volumes = map[string]*pb.VolumeView{}
	}
	f.volumes["4a0e"] = &pb.VolumeView{Volume: &pb.Volume{Id: "4a0e", Name: "db", PluginId: "p"}}
	f.volumes["4a0e0x"] = &pb.VolumeView{Volume: &pb.Volume{Id: "4a0e0x", Name: "db2", PluginId: "p"}}
	f.mu.Unlock()
	wantOut(t, []string{"volume", "status", "-address", f.url, "4a0e"}, 0, "db")
	wantOut(t, []string{"volume", "status", "-address", f.url, "4a0e0"}, 1,
		`"4a0e0" names CSI volume "4a0e0x" and dynamic host volume `+hostVolID)
	wantOut(t, []string{"volume", "status", "-address", f.url, "4a0e00"}, 0, "ID            = "+hostVolID)
	out := wantOut(t, []string{"volume", "status", "-address", f.url, "-json"}, 0, `"4a0e0x"`)
	if !strings.HasPrefix(strings.TrimSpace(out), "[") || strings.Contains(out, hostVolID) {
		t.Fatalf("volume status -json without -type: want the bare array of CSI volumes:\n%s", out)
	}
	out = wantOut(t, []string{"volume", "status", "-address", f.url, "-json", "-type", "host"}, 0, hostVolID)
	if !strings.HasPrefix(strings.TrimSpace(out), "[") || strings.Contains(out, `"4a0e0x"`) {
		t.Fatalf("volume status -json -type host: want an array of host volumes:\n%s", out)
	}
	wantOut(t, []string{"volume", "delete", "-address", f.url, "-force", "4a0e00"}, 0,
		"Warning: host volume forgotten without asking its node", "Successfully deleted host volume "+hostVolID)
}

// An exact ID of either kind wins even when the other kind has several
// IDs starting with it: a CSI volume "db" beside host volumes whose UUIDs
// start with "db" is shown; the prefix "db0" is ambiguous among the host
// volumes alone.
func TestVolumeExactIDWinsOverAnAmbiguousPrefix(t *testing.T) {
	const host1, host2 = "db000000-0000-4000-8000-000000000001", "db000000-0000-4000-8000-000000000002"
	f := newFakeCluster(t)
	f.mu.Lock()
	f.hostVolumes = map[string]*pb.HostVolume{
		host1: {Id: host1, Name: "pg", NodeId: nodeA, State: pb.HostVolumeState_HOST_VOLUME_STATE_READY},
		host2: {Id: host2, Name: "pg2", NodeId: nodeA, State: pb.HostVolumeState_HOST_VOLUME_STATE_READY},
	}
	if f.volumes == nil {
		f.volumes = map[string]*pb.VolumeView{}
	}
	f.volumes["db"] = &pb.VolumeView{Volume: &pb.Volume{Id: "db", Name: "database", PluginId: "p"}}
	f.mu.Unlock()
	wantOut(t, []string{"volume", "status", "-address", f.url, "db"}, 0, "database")
	wantOut(t, []string{"volume", "status", "-address", f.url, host1}, 0, "ID            = "+host1)
	wantOut(t, []string{"volume", "status", "-address", f.url, "db0"}, 1, `prefix "db0" matches 2 host volumes`)
}
