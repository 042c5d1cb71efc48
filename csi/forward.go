package csi

import (
	"context"
	"fmt"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/errcode"
)

// ForwardedMethod is a CSI Controller RPC a server may ask a node to make
// on the controller instance it runs: its deadline's Call and its message
// types.
type ForwardedMethod struct {
	Call         Call
	NewRequest   func() proto.Message
	NewResponse  func() proto.Message
	volumeIDFrom func(proto.Message) string
}

// forwarded is the allow-list of what servers may forward: the Controller
// calls the volume API and the servers' reconcilers make. Nothing else of
// the plugin (node calls, identity) is reachable through a node's tunnel.
var forwarded = map[string]ForwardedMethod{
	csipb.Controller_CreateVolume_FullMethodName:               fwd[*csipb.CreateVolumeRequest, *csipb.CreateVolumeResponse](CallCreateVolume),
	csipb.Controller_DeleteVolume_FullMethodName:               fwd[*csipb.DeleteVolumeRequest, *csipb.DeleteVolumeResponse](CallDeleteVolume),
	csipb.Controller_ControllerPublishVolume_FullMethodName:    fwd[*csipb.ControllerPublishVolumeRequest, *csipb.ControllerPublishVolumeResponse](CallControllerPublishVolume),
	csipb.Controller_ControllerUnpublishVolume_FullMethodName:  fwd[*csipb.ControllerUnpublishVolumeRequest, *csipb.ControllerUnpublishVolumeResponse](CallControllerUnpublishVolume),
	csipb.Controller_ValidateVolumeCapabilities_FullMethodName: fwd[*csipb.ValidateVolumeCapabilitiesRequest, *csipb.ValidateVolumeCapabilitiesResponse](CallValidateVolumeCapabilities),
	csipb.Controller_ListVolumes_FullMethodName:                fwd[*csipb.ListVolumesRequest, *csipb.ListVolumesResponse](CallListVolumes),
	csipb.Controller_GetCapacity_FullMethodName:                fwd[*csipb.GetCapacityRequest, *csipb.GetCapacityResponse](CallGetCapacity),
	csipb.Controller_ControllerExpandVolume_FullMethodName:     fwd[*csipb.ControllerExpandVolumeRequest, *csipb.ControllerExpandVolumeResponse](CallControllerExpandVolume),
	csipb.Controller_CreateSnapshot_FullMethodName:             fwd[*csipb.CreateSnapshotRequest, *csipb.CreateSnapshotResponse](CallCreateSnapshot),
	csipb.Controller_DeleteSnapshot_FullMethodName:             fwd[*csipb.DeleteSnapshotRequest, *csipb.DeleteSnapshotResponse](CallDeleteSnapshot),
	csipb.Controller_ListSnapshots_FullMethodName:              fwd[*csipb.ListSnapshotsRequest, *csipb.ListSnapshotsResponse](CallListSnapshots),
}

// volumeIDed is what the requests about one volume have in common.
type volumeIDed interface{ GetVolumeId() string }

func fwd[Req, Resp proto.Message](call Call) ForwardedMethod {
	var req Req
	var resp Resp
	newReq := func() proto.Message { return req.ProtoReflect().New().Interface() }
	newResp := func() proto.Message { return resp.ProtoReflect().New().Interface() }
	return ForwardedMethod{Call: call, NewRequest: newReq, NewResponse: newResp, volumeIDFrom: func(m proto.Message) string {
		if v, ok := m.(volumeIDed); ok {
			return v.GetVolumeId()
		}
		if c, ok := m.(*csipb.CreateVolumeRequest); ok {
			return c.GetName()
		}
		return ""
	}}
}

// ForwardedMethodOf returns the allow-listed Controller method of a full
// method name ("/csi.v1.Controller/ControllerPublishVolume").
func ForwardedMethodOf(method string) (ForwardedMethod, bool) {
	m, ok := forwarded[method]
	return m, ok
}

// ForwardedMethods lists the allow-list's full method names.
func ForwardedMethods() []string {
	out := make([]string, 0, len(forwarded))
	for m := range forwarded {
		out = append(out, m)
	}
	return out
}

// ErrNotForwardable is returned by Invoke for a method outside the
// allow-list of Controller calls servers may make through a node.
var ErrNotForwardable = errcode.New(codes.PermissionDenied, "not a csi controller method servers may call through a node")

// Invoke makes one allow-listed Controller call by its full method name,
// with the call's deadline (a sooner one on ctx wins), for a caller that
// relays requests it did not build (a node making a server's call). A
// failure is a gRPC status with the plugin's code and its message, less
// every secret of the request; the request is logged, redacted, only at
// trace level. The call table's deadline applies; its NotFound rule does
// not: a NotFound is relayed as it is, for the caller to read by the table.
func (c *Client) Invoke(ctx context.Context, method string, req, resp proto.Message) error {
	m, ok := forwarded[method]
	if !ok {
		return fmt.Errorf("csi method %q: %w", method, ErrNotForwardable)
	}
	cl := c.Controller.c
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > cl.timeouts.of(m.Call) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cl.timeouts.of(m.Call))
		defer cancel()
	}
	volumeID := m.volumeIDFrom(req)
	if cl.logger.IsTrace() {
		cl.logger.Trace("csi call (forwarded)", "call", m.Call, "volume", volumeID, "request", RedactedString(req))
	}
	start := time.Now()
	err := c.cc.Invoke(ctx, method, req, resp)
	code := status.Code(err)
	cl.observeCall(m.Call, code, start, err != nil && (code != codes.NotFound || !m.Call.NotFoundIsSuccess()))
	if err == nil {
		return nil
	}
	st := status.Convert(err)
	msg := scrubSecrets(st.Message(), req)
	if st.Code() == codes.Unavailable && cl.gone != nil {
		if why := cl.gone(); why != nil {
			msg = fmt.Sprintf("%s: %v (%s)", ErrPluginShutdown, why, msg)
		}
	}
	cl.logger.Debug("csi call (forwarded) failed", "call", m.Call, "volume", volumeID, "code", st.Code(), "error", msg)
	return status.Error(st.Code(), msg)
}

// Conn is the connection the client's calls go over.
func (c *Client) Conn() grpc.ClientConnInterface { return c.cc }
