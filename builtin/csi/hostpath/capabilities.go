package hostpath

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// volCap is a validated csi.VolumeCapability.
type volCap struct {
	kind  string // kindMount or kindBlock
	mode  csi.VolumeCapability_AccessMode_Mode
	flags mountFlags
}

// mountFlags are the per-mount options a bind mount can carry.
type mountFlags struct {
	readOnly                                   bool
	noSuid, noDev, noExec, noAtime, noDirAtime bool
	relAtime, strictAtime                      bool
}

// parseCapability validates c. The error text says what is wrong; callers
// choose the gRPC code (usually InvalidArgument).
func parseCapability(c *csi.VolumeCapability) (volCap, error) {
	var vc volCap
	if c == nil {
		return vc, fmt.Errorf("volume capability is missing")
	}
	vc.mode = c.GetAccessMode().GetMode()
	if _, known := csi.VolumeCapability_AccessMode_Mode_name[int32(vc.mode)]; !known || vc.mode == csi.VolumeCapability_AccessMode_UNKNOWN {
		return vc, fmt.Errorf("access mode %v is missing or unknown", vc.mode)
	}
	switch at := c.GetAccessType().(type) {
	case *csi.VolumeCapability_Block:
		vc.kind = kindBlock
	case *csi.VolumeCapability_Mount:
		vc.kind = kindMount
		m := at.Mount
		if m.GetFsType() != "" {
			return vc, fmt.Errorf("fs_type %q is not supported: hostpath mount volumes are directories on the state directory's filesystem, leave fs_type empty (or use a block volume)", m.GetFsType())
		}
		if m.GetVolumeMountGroup() != "" {
			return vc, fmt.Errorf("volume_mount_group is not supported (the plugin does not advertise VOLUME_MOUNT_GROUP); use the mode/uid/gid volume parameters")
		}
		flags, err := parseMountFlags(m.GetMountFlags())
		if err != nil {
			return vc, err
		}
		vc.flags = flags
	default:
		return vc, fmt.Errorf("access type is missing: set mount or block")
	}
	return vc, nil
}

func parseMountFlags(opts []string) (mountFlags, error) {
	var f mountFlags
	for _, o := range opts {
		for _, opt := range strings.Split(o, ",") {
			switch strings.TrimSpace(opt) {
			case "", "defaults", "rw":
			case "ro":
				f.readOnly = true
			case "nosuid":
				f.noSuid = true
			case "suid":
				f.noSuid = false
			case "nodev":
				f.noDev = true
			case "dev":
				f.noDev = false
			case "noexec":
				f.noExec = true
			case "exec":
				f.noExec = false
			case "noatime":
				f.noAtime = true
			case "atime":
				f.noAtime = false
			case "nodiratime":
				f.noDirAtime = true
			case "diratime":
				f.noDirAtime = false
			case "relatime":
				f.relAtime, f.strictAtime = true, false
			case "strictatime":
				f.strictAtime, f.relAtime = true, false
			default:
				return f, fmt.Errorf("mount flag %q is not supported on a bind mount (supported: ro, rw, nosuid, suid, nodev, dev, noexec, exec, noatime, atime, nodiratime, diratime, relatime, strictatime)", opt)
			}
		}
	}
	return f, nil
}

// parseCapabilities validates a CreateVolume capability list and returns the
// volume kind: a hostpath volume is either a directory or a block image.
func parseCapabilities(caps []*csi.VolumeCapability) (string, error) {
	if len(caps) == 0 {
		return "", fmt.Errorf("volume_capabilities is missing")
	}
	kind := ""
	for i, c := range caps {
		vc, err := parseCapability(c)
		if err != nil {
			return "", fmt.Errorf("volume_capabilities[%d]: %v", i, err)
		}
		if kind != "" && vc.kind != kind {
			return "", fmt.Errorf("volume_capabilities mix mount and block access; a hostpath volume is one or the other")
		}
		kind = vc.kind
	}
	return kind, nil
}

func isMultiNode(m csi.VolumeCapability_AccessMode_Mode) bool {
	switch m {
	case csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER,
		csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER:
		return true
	}
	return false
}

func isReaderOnly(m csi.VolumeCapability_AccessMode_Mode) bool {
	return m == csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY ||
		m == csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
}

// singleWriter reports whether the mode allows at most one writer.
func singleWriter(m csi.VolumeCapability_AccessMode_Mode) bool {
	switch m {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
		csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER:
		return true
	}
	return false
}

func modeName(m csi.VolumeCapability_AccessMode_Mode) string { return m.String() }

// encodeCapability stores a capability in a record.
func encodeCapability(c *csi.VolumeCapability) json.RawMessage {
	b, err := protojson.Marshal(c)
	if err != nil {
		// A message that came off the wire always marshals.
		panic("hostpath: encode capability: " + err.Error())
	}
	return json.RawMessage(b)
}

func decodeCapability(raw json.RawMessage) (*csi.VolumeCapability, error) {
	c := &csi.VolumeCapability{}
	if err := protojson.Unmarshal(raw, c); err != nil {
		return nil, err
	}
	return c, nil
}

// sameCapability reports whether a stored capability equals c.
func sameCapability(raw json.RawMessage, c *csi.VolumeCapability) bool {
	stored, err := decodeCapability(raw)
	return err == nil && proto.Equal(stored, c)
}

// attributes are the volume properties set through (mutable) parameters:
// the permissions and ownership of a mount volume's root directory.
type attributes struct {
	Mode uint32 `json:"mode"`
	UID  int    `json:"uid"` // -1 = leave as is
	GID  int    `json:"gid"` // -1 = leave as is
}

const defaultVolumeMode = 0o777

// Parameter keys accepted in CreateVolume parameters and mutable_parameters
// and in ControllerModifyVolume.
const (
	ParamMode = "mode" // octal permissions of a mount volume's root, default 0777
	ParamUID  = "uid"  // owner of a mount volume's root
	ParamGID  = "gid"  // group of a mount volume's root
)

// applyParameters overlays params onto a, refusing unknown keys and values.
// where names the request field, for the error text.
func applyParameters(a attributes, kind, where string, params map[string]string) (attributes, error) {
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := params[k]
		switch k {
		case ParamMode, ParamUID, ParamGID:
			if kind == kindBlock {
				return a, fmt.Errorf("%s[%q]: only applies to mount volumes", where, k)
			}
		default:
			return a, fmt.Errorf("%s[%q]: unknown parameter (supported: %s, %s, %s)", where, k, ParamMode, ParamUID, ParamGID)
		}
		switch k {
		case ParamMode:
			m, err := strconv.ParseUint(v, 8, 32)
			if err != nil || m > 0o7777 {
				return a, fmt.Errorf("%s[%q]: %q is not an octal mode such as 0770", where, k, v)
			}
			a.Mode = uint32(m)
		case ParamUID, ParamGID:
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 1<<31-2 {
				return a, fmt.Errorf("%s[%q]: %q is not a numeric id", where, k, v)
			}
			if k == ParamUID {
				a.UID = n
			} else {
				a.GID = n
			}
		}
	}
	return a, nil
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func copyMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func dedupSorted(in []string) []string {
	out := append([]string(nil), in...)
	sort.Strings(out)
	j := 0
	for i, s := range out {
		if i == 0 || s != out[j-1] {
			out[j] = s
			j++
		}
	}
	return out[:j]
}
