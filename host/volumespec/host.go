package volumespec

import (
	"fmt"
	"os"
	"slices"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"

	"berth.dev/berth/internal/hclsrc"
	"berth.dev/berth/internal/uuid"
	"berth.dev/berth/rpc/pb"
)

// A dynamic host volume file (type = "host", Nomad 1.10's dynamic host
// volume specification):
//
//	type      = "host"
//	name      = "pg-data"            # what group volumes name (source)
//	id        = "<uuid>"             # optional: to update the volume of that ID
//	plugin_id = "mkdir"              # default; or an executable of the client's host_volume_plugin_dir
//	node_id   = "<node uuid>"        # or constraint blocks; else any ready node
//	capacity_min = "1GiB"
//	capacity_max = "10GiB"
//	capability {
//	  access_mode     = "single-node-writer"
//	  attachment_mode = "file-system"
//	}
//	constraint {
//	  attribute = "${meta.disk}"
//	  value     = "ssd"
//	}
//	parameters {
//	  mode = "0750"
//	}

// hostAccessModes are the access modes a host volume may offer: it is on
// one node.
var hostAccessModes = []string{"single-node-reader-only", "single-node-writer", "single-node-single-writer", "single-node-multi-writer"}

// hostOperators are the constraint operators a host volume's node choice
// takes (the scheduler's, but distinct_hosts).
var hostOperators = []string{"=", "==", "!=", "regexp", "version", "is_set", "is_not_set"}

// Type returns a volume file's type attribute ("" when absent or not
// readable: Parse then reports what is wrong).
func Type(filename string, src []byte) string {
	d := newDecoder()
	body := d.Parse(filename, src, "volume file")
	if body == nil {
		return ""
	}
	c, _, _ := body.PartialContent(&hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "type"}}})
	a := c.Attributes["type"]
	if a == nil {
		return ""
	}
	v, diags := a.Expr.Value(nil)
	if diags.HasErrors() || v.IsNull() || !v.Type().Equals(cty.String) {
		return ""
	}
	return v.AsString()
}

// ParseHostFile reads the dynamic host volume file at path (see ParseHost).
func ParseHostFile(path string) (*pb.HostVolume, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("volume file: %w", err)
	}
	return ParseHost(path, src)
}

// ParseHost parses a dynamic host volume file (type = "host"): HCL, or
// HCL's JSON syntax when filename ends in ".json". The volume has passed
// ValidateHost. On failure the error is *Errors listing every problem with
// its position and field path.
func ParseHost(filename string, src []byte) (*pb.HostVolume, error) {
	d := newDecoder()
	body := d.source(filename, src)
	if body == nil {
		return nil, d.err("")
	}
	v := d.hostVolume(body)
	CanonicalizeHost(v)
	validateHost(v, d.invalid)
	if err := d.err(v.GetName()); err != nil {
		return nil, err
	}
	return v, nil
}

func (d *decoder) hostVolume(body hcl.Body) *pb.HostVolume {
	v := &pb.HostVolume{}
	c := d.content(body, "",
		[]string{"id", "name", "type", "plugin_id", "node_id", "node_pool", "capacity_min", "capacity_max"},
		[]string{"capability", "constraint", "parameters"})
	for name, dst := range map[string]*string{"id": &v.Id, "name": &v.Name, "plugin_id": &v.PluginId, "node_id": &v.NodeId} {
		if a := c.Attributes[name]; a != nil {
			if s, ok := d.str(a, name); ok {
				*dst = s
			}
		}
	}
	if a := c.Attributes["type"]; a != nil {
		if s, ok := d.str(a, "type"); ok && s != "host" {
			d.errAt(a.Expr.Range(), "type", ErrInvalidVolume, `a dynamic host volume's type is "host", got %q`, s)
		}
	}
	if a := c.Attributes["node_pool"]; a != nil {
		d.errAt(a.Expr.Range(), "node_pool", ErrInvalidVolume, "berth has no node pools: choose the node with node_id or constraint blocks")
	}
	for name, dst := range map[string]*int64{"capacity_min": &v.RequestedCapacityMinBytes, "capacity_max": &v.RequestedCapacityMaxBytes} {
		if a := c.Attributes[name]; a != nil {
			if n, ok := d.bytes(a, name); ok {
				*dst = n
			}
		}
	}
	for i, b := range c.Blocks.OfType("capability") {
		v.Capabilities = append(v.Capabilities, d.capability(b, fmt.Sprintf("capability[%d]", i)))
	}
	for i, b := range c.Blocks.OfType("constraint") {
		path := fmt.Sprintf("constraint[%d]", i)
		d.pos[path] = d.Pos(b.DefRange)
		cc := d.content(b.Body, path, []string{"attribute", "operator", "value"}, nil)
		con := &pb.Constraint{Operator: "="}
		// "${meta.disk}" is the node's, kept as written (as a job's).
		d.Style.Templates = true
		for name, dst := range map[string]*string{"attribute": &con.Attribute, "operator": &con.Operator, "value": &con.Value} {
			if a := cc.Attributes[name]; a != nil {
				if s, ok := d.str(a, path+"."+name); ok {
					*dst = s
				}
			}
		}
		d.Style.Templates = false
		v.Constraints = append(v.Constraints, con)
	}
	if b := d.single(c.Blocks, "parameters", ""); b != nil {
		v.Parameters = d.stringMap(b, "parameters")
	}
	return v
}

// CanonicalizeHost fills in a host volume's defaults: plugin mkdir, and
// one single-node-writer file-system capability when it names none.
func CanonicalizeHost(v *pb.HostVolume) {
	if v.GetPluginId() == "" {
		v.PluginId = "mkdir"
	}
	if len(v.GetCapabilities()) == 0 {
		v.Capabilities = []*pb.VolumeCapability{{
			AccessMode:     pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER,
			AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM,
		}}
	}
	// A host volume is a directory: file-system is the only attachment
	// mode, the one a capability that names none gets.
	for _, c := range v.GetCapabilities() {
		if c.GetAttachmentMode() == pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_UNSPECIFIED {
			c.AttachmentMode = pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM
		}
	}
}

// ValidateHost checks a dynamic host volume as the servers receive it;
// the error is *Errors naming each problem by field path.
func ValidateHost(v *pb.HostVolume) error {
	var errs hclsrc.Errors
	validateHost(v, func(path, format string, args ...any) {
		errs.Add(Pos{}, path, ErrInvalidVolume, format, args...)
	})
	return (&Errors{Volume: v.GetName(), Errs: errs}).err()
}

func validateHost(v *pb.HostVolume, add func(path, format string, args ...any)) {
	if why := checkID(v.GetName()); why != "" {
		add("name", "%s", why)
	}
	if id := v.GetId(); id != "" && !uuid.Valid(id) {
		add("id", "%q is not a UUID: leave it out to create a volume, or give the ID berth answered to update one", id)
	}
	if p := v.GetPluginId(); p == "." || p == ".." || slices.ContainsFunc([]rune(p), func(r rune) bool { return r == '/' || r == '\\' }) {
		add("plugin_id", "%q is not a plugin name (the built-in \"mkdir\", or a file name of the client's host_volume_plugin_dir)", p)
	}
	if id := v.GetNodeId(); id != "" && !uuid.Valid(id) {
		add("node_id", "%q is not a node ID (a UUID: berth node status lists them)", id)
	}
	if lo, hi := v.GetRequestedCapacityMinBytes(), v.GetRequestedCapacityMaxBytes(); hi > 0 && lo > hi {
		add("capacity_min", "%d bytes is more than capacity_max (%d)", lo, hi)
	}
	for i, c := range v.GetCapabilities() {
		path := fmt.Sprintf("capability[%d]", i)
		if w := pb.EnumWord(c.GetAccessMode()); !slices.Contains(hostAccessModes, w) {
			add(path+".access_mode", "a host volume is on one node: access mode %q is not one of %q", w, hostAccessModes)
		}
		if c.GetAttachmentMode() != pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM {
			add(path+".attachment_mode", "a host volume is mounted as a file system: want \"file-system\", got %q", pb.EnumWord(c.GetAttachmentMode()))
		}
	}
	for i, c := range v.GetConstraints() {
		path := fmt.Sprintf("constraint[%d]", i)
		if !slices.Contains(hostOperators, c.GetOperator()) {
			add(path+".operator", "unknown operator %q (one of %q)", c.GetOperator(), hostOperators)
		}
		if c.GetAttribute() == "" {
			add(path+".attribute", "required: what of the node to check, such as \"${meta.disk}\"")
		}
	}
}
