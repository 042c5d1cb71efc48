package rules

import (
	"fmt"
	"strings"

	"berth.dev/berth/rpc/pb"
)

// VolumeID is the volume a group volume request claims for the alloc at
// index: its source, with "[<index>]" appended when per_alloc is set. The
// scheduler claims it and the client's volume hook asks for it.
func VolumeID(req *pb.VolumeRequest, index int32) string {
	if req.GetPerAlloc() {
		return fmt.Sprintf("%s[%d]", req.GetSource(), index)
	}
	return req.GetSource()
}

// VolumeEnvPrefix starts the environment variable a task finds a mounted
// volume in.
const VolumeEnvPrefix = "BERTH_VOLUME_"

// VolumeEnvName is the environment variable a volume_mount's group volume
// is named in: VolumeEnvPrefix and the name upper-cased, every character
// outside [A-Z0-9_] an underscore (so "data-1" and "data.1" share one: the
// jobspec refuses two such volumes mounted in one task).
func VolumeEnvName(volume string) string {
	var b strings.Builder
	b.WriteString(VolumeEnvPrefix)
	for _, r := range strings.ToUpper(volume) {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}
