package volumespec

import (
	"fmt"
	"math"
	"math/big"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"

	"berth.dev/berth/internal/hclsrc"
	"berth.dev/berth/rpc/pb"
)

// volume decodes the file's root body.
func (d *decoder) volume(body hcl.Body) *pb.Volume {
	v := &pb.Volume{}
	c := d.content(body, "",
		[]string{"id", "name", "type", "plugin_id", "external_id", "capacity_min", "capacity_max", "snapshot_id", "clone_id"},
		[]string{"capability", "mount_options", "topology_request", "secrets", "parameters", "context"})
	for name, dst := range map[string]*string{
		"id": &v.Id, "name": &v.Name, "plugin_id": &v.PluginId, "external_id": &v.ExternalId,
		"snapshot_id": &v.SnapshotId, "clone_id": &v.CloneId,
	} {
		if a := c.Attributes[name]; a != nil {
			if s, ok := d.str(a, name); ok {
				*dst = s
			}
		}
	}
	if a := c.Attributes["type"]; a != nil {
		if s, ok := d.str(a, "type"); ok && s != "csi" {
			d.errAt(a.Expr.Range(), "type", ErrInvalidVolume, `unknown volume type %q: the only type is "csi"%s`, s, didYouMean(s, []string{"csi"}))
		}
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
	if b := d.single(c.Blocks, "mount_options", ""); b != nil {
		mc := d.content(b.Body, "mount_options", []string{"fs_type", "mount_flags"}, nil)
		v.MountOptions = &pb.MountOptions{}
		if a := mc.Attributes["fs_type"]; a != nil {
			v.MountOptions.FsType, _ = d.str(a, "mount_options.fs_type")
		}
		if a := mc.Attributes["mount_flags"]; a != nil {
			v.MountOptions.MountFlags = d.strings(a, "mount_options.mount_flags")
		}
	}
	if b := d.single(c.Blocks, "topology_request", ""); b != nil {
		tc := d.content(b.Body, "topology_request", nil, []string{"required", "preferred"})
		v.TopologyRequest = &pb.TopologyRequest{}
		if rb := d.single(tc.Blocks, "required", "topology_request"); rb != nil {
			v.TopologyRequest.Required = d.topologies(rb, "topology_request.required")
		}
		if pbk := d.single(tc.Blocks, "preferred", "topology_request"); pbk != nil {
			v.TopologyRequest.Preferred = d.topologies(pbk, "topology_request.preferred")
		}
	}
	for name, dst := range map[string]*map[string]string{"secrets": &v.Secrets, "parameters": &v.Parameters, "context": &v.Context} {
		if b := d.single(c.Blocks, name, ""); b != nil {
			*dst = d.stringMap(b, name)
		}
	}
	return v
}

func (d *decoder) capability(b *hcl.Block, path string) *pb.VolumeCapability {
	d.pos[path] = d.Pos(b.DefRange)
	c := d.content(b.Body, path, []string{"access_mode", "attachment_mode"}, nil)
	out := &pb.VolumeCapability{}
	if a := c.Attributes["access_mode"]; a != nil {
		if s, ok := d.str(a, path+".access_mode"); ok {
			if out.AccessMode = accessModes[s]; out.AccessMode == pb.VolumeAccessMode_VOLUME_ACCESS_MODE_UNSPECIFIED {
				d.errAt(a.Expr.Range(), path+".access_mode", ErrInvalidVolume, "unknown access mode %q%s", s, didYouMean(s, words(accessModes)))
			}
		}
	}
	if a := c.Attributes["attachment_mode"]; a != nil {
		if s, ok := d.str(a, path+".attachment_mode"); ok {
			if out.AttachmentMode = attachmentModes[s]; out.AttachmentMode == pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_UNSPECIFIED {
				d.errAt(a.Expr.Range(), path+".attachment_mode", ErrInvalidVolume, `unknown attachment mode %q: "file-system" or "block-device"%s`, s, didYouMean(s, words(attachmentModes)))
			}
		}
	}
	return out
}

// topologies reads `required { topology { segments { k = "v" } } ... }`.
func (d *decoder) topologies(b *hcl.Block, path string) []*pb.Topology {
	c := d.content(b.Body, path, nil, []string{"topology"})
	var out []*pb.Topology
	for i, tb := range c.Blocks.OfType("topology") {
		p := fmt.Sprintf("%s.topology[%d]", path, i)
		d.pos[p] = d.Pos(tb.DefRange)
		tc := d.content(tb.Body, p, nil, []string{"segments"})
		t := &pb.Topology{}
		if sb := d.single(tc.Blocks, "segments", p); sb != nil {
			t.Segments = d.stringMap(sb, p+".segments")
		}
		out = append(out, t)
	}
	return out
}

// byteUnits are the sizes a capacity may be written in ("10GiB", "500 MB").
var byteUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1000, "kb": 1000, "m": 1000 * 1000, "mb": 1000 * 1000, "g": 1000 * 1000 * 1000, "gb": 1000 * 1000 * 1000,
	"t": 1000 * 1000 * 1000 * 1000, "tb": 1000 * 1000 * 1000 * 1000,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}

// bytes reads a capacity: a number of bytes, or a string with a unit.
func (d *decoder) bytes(a *hcl.Attribute, path string) (int64, bool) {
	v, ok := d.Value(a, hclsrc.FieldPath(path))
	if !ok {
		return 0, false
	}
	switch v.Type() {
	case cty.Number:
		bf := v.AsBigFloat()
		n, acc := bf.Int64()
		if acc != big.Exact || n < 0 {
			d.errAt(a.Expr.Range(), path, ErrInvalidVolume, "a whole, non-negative number of bytes is required")
			return 0, false
		}
		return n, true
	case cty.String:
		n, err := ParseBytes(v.AsString())
		if err != nil {
			d.errAt(a.Expr.Range(), path, ErrInvalidVolume, "%v", err)
			return 0, false
		}
		return n, true
	}
	d.errAt(a.Expr.Range(), path, ErrWrongType, `a size is required ("10GiB", "500MB" or a number of bytes), got %s`, v.Type().FriendlyName())
	return 0, false
}

// ParseBytes reads a size such as "10GiB", "500 MB" or "1024": units B,
// KB/MB/GB/TB (powers of 1000, K/M/G/T alike) and KiB/MiB/GiB/TiB (powers
// of 1024), case-insensitive.
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	mult, ok := byteUnits[unit]
	if num == "" || !ok {
		return 0, fmt.Errorf(`size %q: write a number with an optional unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)`, s)
	}
	f, _, err := big.ParseFloat(num, 10, 128, big.ToNearestEven)
	if err != nil {
		return 0, fmt.Errorf("size %q: %v", s, err)
	}
	f.Mul(f, new(big.Float).SetInt64(mult))
	if !f.IsInt() || f.Cmp(big.NewFloat(math.MaxInt64)) >= 0 {
		return 0, fmt.Errorf("size %q is not a whole number of bytes within range", s)
	}
	n, _ := f.Int64()
	return n, nil
}
