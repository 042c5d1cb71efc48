package csi

import (
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// ErrControllerInstanceChanged is returned for a controller call addressed
// to one instance of a plugin ID on a node (CSIControllerCallRequest.expect)
// when another instance serves the ID there now: the call was not made,
// since the other instance may be in front of another backend.
var ErrControllerInstanceChanged = errcode.New(codes.FailedPrecondition, "the csi plugin's controller instance on the node is not the one the call was addressed to")

// The ErrorInfo that marks ErrControllerInstanceChanged on the wire: a
// plugin's own FailedPrecondition (a volume published elsewhere) must not
// read as it.
const (
	instanceChangedDomain = "csi.berth.dev"
	instanceChangedReason = "CONTROLLER_INSTANCE_CHANGED"
)

// InstanceOf names the instance info describes, for
// CSIControllerCallRequest.expect.
func InstanceOf(info *pb.CSIPluginInfo) *pb.CSIControllerInstance {
	return &pb.CSIControllerInstance{Source: info.GetSource(), AllocId: info.GetAllocId()}
}

// CheckInstance returns nil when expect is unset or names the instance
// have describes, and otherwise an error wrapping
// ErrControllerInstanceChanged naming both.
func CheckInstance(expect *pb.CSIControllerInstance, have *pb.CSIPluginInfo) error {
	if expect == nil || (expect.GetSource() == have.GetSource() && expect.GetAllocId() == have.GetAllocId()) {
		return nil
	}
	return fmt.Errorf("%w: addressed to %s, served by %s", ErrControllerInstanceChanged,
		describe(expect.GetSource(), expect.GetAllocId()), describe(have.GetSource(), have.GetAllocId()))
}

func describe(src pb.CSIPluginSource, allocID string) string {
	switch {
	case src == pb.CSIPluginSource_CSI_PLUGIN_SOURCE_ADAPTER:
		return "the storage adapter"
	case allocID != "":
		return "the task plugin of alloc " + allocID
	default:
		return "an instance of source " + src.String()
	}
}

// InstanceChangedStatus is the gRPC status of err, which wraps
// ErrControllerInstanceChanged, marked so InstanceChanged knows it after
// it crossed the wire.
func InstanceChangedStatus(err error) error {
	st := status.New(codes.FailedPrecondition, err.Error())
	if d, derr := st.WithDetails(&errdetails.ErrorInfo{Domain: instanceChangedDomain, Reason: instanceChangedReason}); derr == nil {
		st = d
	}
	return st.Err()
}

// InstanceChanged reports whether err is ErrControllerInstanceChanged,
// in this process or marked by InstanceChangedStatus on a status error
// anywhere in its chain.
func InstanceChanged(err error) bool {
	if errors.Is(err, ErrControllerInstanceChanged) {
		return true
	}
	for e := err; e != nil; {
		if s, ok := e.(interface{ GRPCStatus() *status.Status }); ok {
			for _, d := range s.GRPCStatus().Details() {
				if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == instanceChangedDomain && info.GetReason() == instanceChangedReason {
					return true
				}
			}
		}
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			e = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, inner := range u.Unwrap() {
				if InstanceChanged(inner) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
}
