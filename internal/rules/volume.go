package rules

import (
	"fmt"

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
