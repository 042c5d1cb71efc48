package volumespec

import (
	"errors"
	"os"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/google/go-cmp/cmp"

	"berth.dev/berth/rpc/pb"
)

func fullVolume() *pb.Volume {
	return &pb.Volume{
		Id: "data[0]", Name: "database", PluginId: "hostpath",
		RequestedCapacityMinBytes: 1 << 30, RequestedCapacityMaxBytes: 2_000_000_000, SnapshotId: "snap-1",
		Capabilities: []*pb.VolumeCapability{
			{AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM},
			{AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_READER_ONLY, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_BLOCK_DEVICE},
		},
		MountOptions: &pb.MountOptions{FsType: "ext4", MountFlags: []string{"noatime", "nodiratime"}},
		TopologyRequest: &pb.TopologyRequest{
			Required:  []*pb.Topology{{Segments: map[string]string{"rack": "r1"}}, {Segments: map[string]string{"rack": "r2", "zone": "z"}}},
			Preferred: []*pb.Topology{{Segments: map[string]string{"rack": "r1"}}},
		},
		Secrets: map[string]string{"token": "s3cr3t"}, Parameters: map[string]string{"tier": "fast"}, Context: map[string]string{"path": "/srv"},
	}
}

func TestParseEveryField(t *testing.T) {
	for _, f := range []string{"testdata/full.hcl", "testdata/full.json"} {
		v, err := ParseFile(f, ForCreate)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if d := cmp.Diff(fullVolume(), v, protocmp.Transform()); d != "" {
			t.Errorf("%s (-want +got):\n%s", f, d)
		}
	}
}

// Every access mode parses to its enum, and the name defaults to the ID.
func TestParseAccessModesAndDefaults(t *testing.T) {
	for word, mode := range accessModes {
		src := `id = "v"
plugin_id = "p"
external_id = "e"
capability {
  access_mode = "` + word + `"
  attachment_mode = "file-system"
}
`
		v, err := Parse("v.hcl", []byte(src), ForRegister)
		if err != nil {
			t.Fatalf("%s: %v", word, err)
		}
		if v.GetCapabilities()[0].GetAccessMode() != mode || v.GetName() != "v" {
			t.Errorf("%s: %v", word, v)
		}
	}
	if len(accessModes) != 7 {
		t.Errorf("%d access modes, want CSI's seven", len(accessModes))
	}
}

func TestParseErrors(t *testing.T) {
	for _, tt := range []struct {
		name, file, src string
		mode            Mode
		want            string
		kind            error
	}{
		{"misspelt key", "v.hcl", "id = \"v\"\nplugn_id = \"p\"\nexternal_id = \"e\"\ncapability {\n  access_mode = \"single-node-writer\"\n  attachment_mode = \"file-system\"\n}\n", ForRegister,
			`volume "v": v.hcl:2:1: plugn_id: unknown key; did you mean "plugin_id"?`, ErrUnknownKey},
		{"misspelt mode", "v.hcl", "id = \"v\"\nplugin_id = \"p\"\nexternal_id = \"e\"\ncapability {\n  access_mode = \"single-node-writr\"\n  attachment_mode = \"file-sytem\"\n}\n", ForRegister,
			"volume \"v\":\n  v.hcl:5:17: capability[0].access_mode: unknown access mode \"single-node-writr\"; did you mean \"single-node-writer\"?\n" +
				"  v.hcl:6:21: capability[0].attachment_mode: unknown attachment mode \"file-sytem\": \"file-system\" or \"block-device\"; did you mean \"file-system\"?", ErrInvalidVolume},
		{"missing capability and external_id", "v.hcl", "id = \"v\"\nplugin_id = \"p\"\n", ForRegister,
			"volume \"v\":\n  v.hcl:1:1: external_id: is required to register a volume: the provider's ID of it (or create the volume instead)\n" +
				"  v.hcl:1:1: capability: at least one capability { access_mode attachment_mode } is required", ErrInvalidVolume},
		{"capacity order", "v.hcl", "id = \"v\"\nplugin_id = \"p\"\ncapacity_min = \"2GiB\"\ncapacity_max = \"1GiB\"\ncapability {\n  access_mode = \"single-node-writer\"\n  attachment_mode = \"file-system\"\n}\n", ForCreate,
			`volume "v": v.hcl:3:1: capacity_min: 2147483648 bytes is over capacity_max (1073741824 bytes)`, ErrInvalidVolume},
		{"bad size", "v.hcl", "id = \"v\"\nplugin_id = \"p\"\ncapacity_min = \"lots\"\ncapability {\n  access_mode = \"single-node-writer\"\n  attachment_mode = \"file-system\"\n}\n", ForCreate,
			`volume "v": v.hcl:3:16: capacity_min: size "lots": write a number with an optional unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)`, ErrInvalidVolume},
		{"wrong type", "v.hcl", "id = 5\nplugin_id = \"p\"\nexternal_id = \"e\"\ncapability {\n  access_mode = \"single-node-writer\"\n  attachment_mode = \"file-system\"\n}\n", ForRegister,
			`volume: v.hcl:1:6: id: a string is required, got number`, ErrWrongType},
		{"block as argument", "v.hcl", "id = \"v\"\nplugin_id = \"p\"\nexternal_id = \"e\"\nsecrets = {a = \"b\"}\ncapability {\n  access_mode = \"single-node-writer\"\n  attachment_mode = \"file-system\"\n}\n", ForRegister,
			`volume "v": v.hcl:4:1: secrets: block required, got argument (write secrets { ... } without =)`, ErrWrongType},
		{"create with external_id and both sources", "v.hcl", "id = \"v\"\nplugin_id = \"p\"\nexternal_id = \"e\"\nsnapshot_id = \"s\"\nclone_id = \"c\"\ncapability {\n  access_mode = \"single-node-writer\"\n  attachment_mode = \"file-system\"\n}\n", ForCreate,
			"volume \"v\":\n  v.hcl:3:1: external_id: is set by the plugin when it creates the volume; register a volume that exists\n  v.hcl:5:1: clone_id: a volume is created from a snapshot_id or a clone_id, not both", ErrInvalidVolume},
		{"type", "v.hcl", "id = \"v\"\ntype = \"host\"\nplugin_id = \"p\"\nexternal_id = \"e\"\ncapability {\n  access_mode = \"single-node-writer\"\n  attachment_mode = \"file-system\"\n}\n", ForRegister,
			`volume "v": v.hcl:2:8: type: unknown volume type "host": the only type is "csi"`, ErrInvalidVolume},
		{"syntax", "v.hcl", "id = \"v\n", ForRegister, "volume:\n  v.hcl:1:8: syntax error: Invalid multi-line string", ErrSyntax},
		{"json misspelt", "v.json", `{"id": "v", "plugin_id": "p", "external_id": "e", "capabilty": []}`, ForRegister,
			`volume "v": v.json:1:51: capabilty: unknown key; did you mean "capability"?`, ErrUnknownKey},
		{"json list of a single block", "v.json", `{"id": "v", "plugin_id": "p", "external_id": "e", "capability": [{"access_mode": "single-node-writer", "attachment_mode": "file-system"}], "mount_options": [{}, {}]}`, ForRegister,
			`volume "v": v.json:1:157: mount_options: duplicate mount_options block (a list of them is given; only one is allowed)`, ErrInvalidVolume},
		{"json root array", "v.json", `[{"id": "v"}]`, ForRegister, `volume: v.json:1:1: the root of a JSON volume file must be an object, not an array`, ErrWrongType},
		{"slash in id", "v.hcl", "id = \"a/b\"\nplugin_id = \"p\"\nexternal_id = \"e\"\ncapability {\n  access_mode = \"single-node-writer\"\n  attachment_mode = \"file-system\"\n}\n", ForRegister,
			`volume "a/b": v.hcl:1:1: id: "a/b" holds '/': a volume ID is one path segment (letters, digits, - _ . [ ] and the like)`, ErrInvalidVolume},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.file, []byte(tt.src), tt.mode)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.HasPrefix(err.Error(), tt.want) || (tt.kind != ErrSyntax && err.Error() != tt.want) {
				t.Errorf("got\n%s\nwant\n%s", err, tt.want)
			}
			if !errors.Is(err, tt.kind) {
				t.Errorf("%v is not %v", err, tt.kind)
			}
		})
	}
}

// A JSON volume from the API goes through Validate with the same rules
// and paths, without positions; Validate does not change it.
func TestValidateVolumeFromAPI(t *testing.T) {
	v := fullVolume()
	v.Provider, v.Schedulable, v.NodeExpansionPendingBytes = "x", true, 1<<30
	before := proto.Clone(v)
	err := Validate(v, ForCreate)
	want := "volume \"data[0]\":\n  provider: is set by the servers, not in a volume specification\n" +
		"  node_expansion_pending_bytes: is set by the servers, not in a volume specification\n" +
		"  schedulable: is set by the servers, not in a volume specification"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want\n%s", err, want)
	}
	if !proto.Equal(v, before) {
		t.Error("Validate changed the volume")
	}
	ok := fullVolume()
	if err := Validate(ok, ForCreate); err != nil {
		t.Fatal(err)
	}
	if err := Validate(ok, ForRegister); err == nil || !strings.Contains(err.Error(), "external_id: is required") || !strings.Contains(err.Error(), "snapshot_id: is for volume create") {
		t.Errorf("a create spec registered: %v", err)
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"1024": 1024, "1GiB": 1 << 30, "2 GB": 2e9, "1.5KiB": 1536, "10mb": 1e7, "3T": 3e12} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "1.1B", "9999999999TiB", "-1", "1 parsec"} {
		if _, err := ParseBytes(in); err == nil {
			t.Errorf("ParseBytes(%q) accepted", in)
		}
	}
}

func TestExampleFilesParse(t *testing.T) {
	ents, err := os.ReadDir("testdata")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if _, err := ParseFile("testdata/"+e.Name(), ForCreate); err != nil {
			t.Errorf("%s: %v", e.Name(), err)
		}
	}
}
