package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/hclsrc"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// HostVolumeConfig is one `host_volume "name" { path = "/abs" read_only = false }`
// block of the client block: a directory of the node that group volumes of
// type "host" name (source = "name").
type HostVolumeConfig struct {
	// Name is the block's label, what a group volume's source names.
	Name string
	// Path is the directory on the node, absolute; it must exist when
	// the agent starts.
	Path string
	// ReadOnly: allocs may only read it; a group volume that writes
	// cannot be placed on this node.
	ReadOnly bool
	// Source is "file:line:col" of the block, for the agent's start-up
	// errors; empty for volumes configured in Go.
	Source string
}

var hostVolumeBlockSchema = hcl.BlockHeaderSchema{Type: "host_volume", LabelNames: []string{"name"}}

// hostVolumes decodes the host_volume blocks of the client block.
func (d *decoder) hostVolumes(blocks hcl.Blocks, c *Config) {
	first := map[string]*hcl.Block{}
	for _, b := range blocks {
		if b.Type != hostVolumeBlockSchema.Type {
			continue
		}
		name := b.Labels[0]
		path := "client.host_volume." + name
		switch {
		case name == "":
			d.Errs.Add(d.Pos(b.LabelRanges[0]), "client.host_volume", ErrInvalidValue, "a host_volume block needs a name")
			continue
		case first[name] != nil:
			d.Duplicate(first[name], b, hclsrc.FieldPath(path), fmt.Sprintf("host_volume %q block", name))
			continue
		}
		first[name] = b
		content := d.Content(b.Body, hclsrc.FieldPath(path), hclsrc.Schema{
			Attrs: []string{"path", "read_only"}, In: fmt.Sprintf("host_volume %q block", name),
		})
		pos := d.Pos(b.DefRange)
		hv := &HostVolumeConfig{Name: name, Source: pos.String()}
		a := content.Attributes["path"]
		if a == nil {
			d.Errs.Add(pos, path+".path", ErrInvalidValue, "host_volume %q needs a path: the directory on the node", name)
		} else if s, ok := hclsrc.Read(&d.Decoder, a, hclsrc.FieldPath(path+".path"), func(v cty.Value) (string, error) {
			s, err := toString(v)
			if err == nil {
				err = checkHostVolumePath(s)
			}
			return s, err
		}); ok {
			hv.Path = s
		}
		if a := content.Attributes["read_only"]; a != nil {
			hv.ReadOnly, _ = hclsrc.Read(&d.Decoder, a, hclsrc.FieldPath(path+".read_only"), toBool)
		}
		c.set[path] = pos
		if c.Client.HostVolumes == nil {
			c.Client.HostVolumes = map[string]*HostVolumeConfig{}
		}
		c.Client.HostVolumes[name] = hv
	}
}

func checkHostVolumePath(s string) error {
	switch {
	case s == "":
		return invalidf("empty: the directory on the node")
	case !filepath.IsAbs(s):
		return invalidf("%q is not an absolute path", s)
	}
	return nil
}

// validateHostVolumes checks what a Config built in Go may get wrong too.
func (c *Config) validateHostVolumes(errs *ConfigErrors) {
	for _, name := range slices.Sorted(maps.Keys(c.Client.HostVolumes)) {
		hv := c.Client.HostVolumes[name]
		path := "client.host_volume." + name
		switch {
		case name == "":
			errs.Add(c.pos(path), "client.host_volume", ErrInvalidValue, "a host_volume block needs a name")
		case hv == nil:
			errs.Add(SourcePos{}, path, ErrInvalidValue, "no configuration")
		case hv.Name != name:
			errs.Add(c.pos(path), path, ErrInvalidValue, "configured under the name %q", hv.Name)
		default:
			if err := checkHostVolumePath(hv.Path); err != nil {
				errs.AddValue(c.pos(path), path+".path", configKinds, err)
			}
		}
	}
}

// mergeHostVolumes lays other's host volumes over out's, by name: a later
// file's block replaces an earlier one of the same name.
func mergeHostVolumes(out, other *Config) {
	for _, name := range slices.Sorted(maps.Keys(other.Client.HostVolumes)) {
		hv := other.Client.HostVolumes[name]
		if hv == nil {
			continue
		}
		if out.Client.HostVolumes == nil {
			out.Client.HostVolumes = map[string]*HostVolumeConfig{}
		}
		path := "client.host_volume." + name
		if pos, ok := other.set[path]; ok && out.set != nil {
			out.set[path] = pos
		}
		cp := *hv
		out.Client.HostVolumes[name] = &cp
	}
}

func cloneHostVolumes(m map[string]*HostVolumeConfig) map[string]*HostVolumeConfig {
	if m == nil {
		return nil
	}
	out := make(map[string]*HostVolumeConfig, len(m))
	for k, v := range m {
		if v != nil {
			cp := *v
			v = &cp
		}
		out[k] = v
	}
	return out
}

// ErrHostVolumePath is returned by HostVolumeInfos (and so by New) when a
// host_volume's path is not a directory on the node.
var ErrHostVolumePath = errcode.New(codes.FailedPrecondition, "host volume path missing")

// HostVolumeInfos checks that every host volume's path is a directory
// now and returns what the client fingerprints of them.
func (c *Config) HostVolumeInfos() (map[string]*pb.HostVolumeInfo, error) {
	if len(c.Client.HostVolumes) == 0 {
		return nil, nil
	}
	out := make(map[string]*pb.HostVolumeInfo, len(c.Client.HostVolumes))
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(c.Client.HostVolumes)) {
		hv := c.Client.HostVolumes[name]
		at := ""
		if hv.Source != "" {
			at = hv.Source + ": "
		}
		st, err := os.Stat(hv.Path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			errs = append(errs, fmt.Errorf("%shost_volume %q: path %q: %w: it does not exist (create the directory before starting the agent)",
				at, name, hv.Path, ErrHostVolumePath))
			continue
		case err != nil:
			errs = append(errs, fmt.Errorf("%shost_volume %q: path %q: %w: %w", at, name, hv.Path, ErrHostVolumePath, err))
			continue
		case !st.IsDir():
			errs = append(errs, fmt.Errorf("%shost_volume %q: path %q: %w: not a directory", at, name, hv.Path, ErrHostVolumePath))
			continue
		}
		out[name] = &pb.HostVolumeInfo{Path: hv.Path, ReadOnly: hv.ReadOnly}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}
