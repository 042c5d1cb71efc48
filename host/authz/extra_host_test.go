package authz

import (
	"testing"

	"berth.dev/berth/internal/acl"
	"berth.dev/berth/rpc/pb"
)

// A forced host volume delete (forgotten without its node) needs operator
// write besides the method's need; a plain one does not.
func TestExtraForcedHostVolumeDelete(t *testing.T) {
	if got := Extra(pb.HostVolumes_Delete_FullMethodName, &pb.HostVolumeDeleteRequest{Id: "v", Force: true}, nil); len(got) != 1 || got[0] != Needs(acl.Operator, acl.CapWrite) {
		t.Fatalf("forced host volume delete: %v", got)
	}
	if got := Extra(pb.HostVolumes_Delete_FullMethodName, &pb.HostVolumeDeleteRequest{Id: "v"}, nil); len(got) != 0 {
		t.Fatalf("host volume delete: %v", got)
	}
}
