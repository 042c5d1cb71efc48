package volumespec

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

func TestParseHost(t *testing.T) {
	src := `
type         = "host"
name         = "pg-data"
plugin_id    = "lvm"
capacity_min = "1GiB"
capacity_max = "10GiB"
capability {
  access_mode = "single-node-single-writer"
}
constraint {
  attribute = "${meta.disk}"
  value     = "ssd"
}
parameters {
  vg = "data"
}
`
	if got := Type("vol.hcl", []byte(src)); got != "host" {
		t.Fatalf("Type = %q", got)
	}
	if got := Type("vol.hcl", []byte(`id = "x"`)); got != "" {
		t.Fatalf("Type of a CSI file = %q", got)
	}
	v, err := ParseHost("vol.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := &pb.HostVolume{Name: "pg-data", PluginId: "lvm", RequestedCapacityMinBytes: 1 << 30, RequestedCapacityMaxBytes: 10 << 30,
		Capabilities: []*pb.VolumeCapability{{AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_SINGLE_WRITER,
			AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}},
		Constraints: []*pb.Constraint{{Attribute: "${meta.disk}", Operator: "=", Value: "ssd"}},
		Parameters:  map[string]string{"vg": "data"}}
	if !proto.Equal(v, want) {
		t.Fatalf("parsed %v\nwant %v", v, want)
	}
	// Defaults: mkdir, one single-node-writer capability.
	v, err = ParseHost("vol.hcl", []byte("type = \"host\"\nname = \"a\"\n"))
	if err != nil || v.GetPluginId() != "mkdir" || len(v.GetCapabilities()) != 1 ||
		v.GetCapabilities()[0].GetAccessMode() != pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER {
		t.Fatalf("defaults: %v, %v", v, err)
	}
}

func TestParseHostErrors(t *testing.T) {
	src := `type = "host"
name = "a/b"
id = "nope"
node_id = "n1"
plugin_id = "../x"
capacity_min = "2GiB"
capacity_max = "1GiB"
capability {
  access_mode     = "multi-node-multi-writer"
  attachment_mode = "block-device"
}
constraint {
  operator = "~"
}
`
	_, err := ParseHost("vol.hcl", []byte(src))
	var errs *Errors
	if !errors.As(err, &errs) || !errors.Is(err, ErrInvalidVolume) {
		t.Fatalf("ParseHost: %v", err)
	}
	for _, w := range []string{
		`vol.hcl:2:1: name: "a/b" holds '/'`,
		`vol.hcl:3:1: id: "nope" is not a UUID`,
		`vol.hcl:4:1: node_id: "n1" is not a node ID`,
		`vol.hcl:5:1: plugin_id: "../x" is not a plugin name`,
		`vol.hcl:6:1: capacity_min: 2147483648 bytes is more than capacity_max (1073741824)`,
		`vol.hcl:9:3: capability[0].access_mode: a host volume is on one node`,
		`vol.hcl:10:3: capability[0].attachment_mode: a host volume is mounted as a file system`,
		`vol.hcl:13:3: constraint[0].operator: unknown operator "~"`,
		`vol.hcl:12:1: constraint[0].attribute: required`,
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error\n%v\nlacks %q", err, w)
		}
	}
	if _, err := ParseHost("vol.hcl", []byte("type = \"csi\"\nname = \"a\"\nnode_pool = \"p\"\n")); err == nil ||
		!strings.Contains(err.Error(), `vol.hcl:1:8: type: a dynamic host volume's type is "host", got "csi"`) ||
		!strings.Contains(err.Error(), "vol.hcl:3:13: node_pool: berth has no node pools") {
		t.Fatalf("type and node_pool: %v", err)
	}
}

// FuzzParseHost checks that ParseHost never panics, answers a volume or
// *Errors, and that an accepted volume passes ValidateHost (what the
// servers run on it).
func FuzzParseHost(f *testing.F) {
	for _, s := range []string{
		"type = \"host\"\nname = \"a\"\ncapability {\n access_mode = \"single-node-writer\"\n}\nparameters { mode = \"0750\" }\n",
		"type = \"host\" name = 1 capability { access_mode = 1 } constraint {} constraint { attribute = \"x\" operator = \"regexp\" }",
		"name = \"a\"\ncapacity_min = 1e99\nnode_pool = \"x\"\nid = \"\"\n",
		"{\"type\": \"host\", \"name\": \"a\", \"capability\": [{}, {}]}",
	} {
		f.Add([]byte(s), strings.HasPrefix(s, "{"))
	}
	f.Fuzz(func(t *testing.T, src []byte, asJSON bool) {
		name := "fuzz.hcl"
		if asJSON {
			name = "fuzz.json"
		}
		_ = Type(name, src)
		v, err := ParseHost(name, src)
		if err != nil {
			var errs *Errors
			if v != nil || !errors.As(err, &errs) {
				t.Fatalf("ParseHost: %v (volume %v)", err, v)
			}
			return
		}
		if err := ValidateHost(v); err != nil {
			t.Fatalf("accepted volume %v fails ValidateHost: %v", v, err)
		}
	})
}
