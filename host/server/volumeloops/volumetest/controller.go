package volumetest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

// Controller is a hand-written controller caller (what the volume loops
// and endpoints call controllers through): it records every
// call, answers from per-method queues of errors (nil: success), keeps
// what is published (volume external ID → CSI node IDs) the way a real
// controller would, and answers ListVolumes from it.
type Controller struct {
	// Mu guards the fields below; a test holds it to read or change them.
	Mu    sync.Mutex
	Calls []Call
	// Errs holds, per method, the errors the next calls return in order.
	Errs map[string][]error
	// Published: external volume ID → CSI node IDs it is published to.
	Published map[string]map[string]bool
	// Context is the publish context every successful publish answers.
	Context map[string]string
	// OnCall, when set, runs at the start of every call, outside the lock
	// (a test blocks a call there, or stops a server).
	OnCall func(ctx context.Context, c Call) error
	// PageSize, when set, makes ListVolumes answer in pages of that many
	// entries, the token being the index of the next one.
	PageSize int
}

// Call is one call a Controller received.
type Call struct {
	Node, Plugin, Method string
	Req                  proto.Message
	Expect               *pb.CSIControllerInstance
}

// NewController returns a controller that publishes with the publish
// context lun=3.
func NewController() *Controller {
	return &Controller{Errs: map[string][]error{}, Published: map[string]map[string]bool{}, Context: map[string]string{"lun": "3"}}
}

// ControllerCall records the call and answers it as a controller would.
func (f *Controller) ControllerCall(ctx context.Context, nodeID, pluginID string, expect *pb.CSIControllerInstance, method string, req, resp proto.Message) error {
	c := Call{nodeID, pluginID, method, proto.Clone(req), expect}
	f.Mu.Lock()
	f.Calls = append(f.Calls, c)
	hook := f.OnCall
	var err error
	if q := f.Errs[method]; len(q) > 0 {
		err, f.Errs[method] = q[0], q[1:]
	}
	f.Mu.Unlock()
	if hook != nil {
		if herr := hook(ctx, c); herr != nil {
			return herr
		}
	}
	if err != nil {
		return err
	}
	f.Mu.Lock()
	defer f.Mu.Unlock()
	switch r := req.(type) {
	case *csipb.ControllerPublishVolumeRequest:
		if f.Published[r.GetVolumeId()] == nil {
			f.Published[r.GetVolumeId()] = map[string]bool{}
		}
		f.Published[r.GetVolumeId()][r.GetNodeId()] = true
		resp.(*csipb.ControllerPublishVolumeResponse).PublishContext = maps.Clone(f.Context)
	case *csipb.ControllerUnpublishVolumeRequest:
		delete(f.Published[r.GetVolumeId()], r.GetNodeId())
	case *csipb.ListVolumesRequest:
		out := resp.(*csipb.ListVolumesResponse)
		ids := slices.Sorted(maps.Keys(f.Published))
		from := 0
		if tok := r.GetStartingToken(); tok != "" {
			if _, err := fmt.Sscan(tok, &from); err != nil || from > len(ids) {
				return status.Errorf(codes.Aborted, "fake controller: bad starting token %q", tok)
			}
		}
		to := len(ids)
		if f.PageSize > 0 && from+f.PageSize < to {
			to = from + f.PageSize
			out.NextToken = fmt.Sprint(to)
		}
		for _, id := range ids[from:to] {
			out.Entries = append(out.Entries, &csipb.ListVolumesResponse_Entry{
				Volume: &csipb.Volume{VolumeId: id},
				Status: &csipb.ListVolumesResponse_VolumeStatus{PublishedNodeIds: slices.Sorted(maps.Keys(f.Published[id]))},
			})
		}
	default:
		return status.Errorf(codes.Unimplemented, "fake controller: %s", method)
	}
	return nil
}

// FailNext makes the next calls of method fail with the codes given.
func (f *Controller) FailNext(method string, cs ...codes.Code) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	for _, c := range cs {
		f.Errs[method] = append(f.Errs[method], status.Errorf(c, "fake plugin says %s", c))
	}
}

// CallsOf returns the calls of method so far.
func (f *Controller) CallsOf(method string) []Call {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	var out []Call
	for _, c := range f.Calls {
		if c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// Methods returns the short names of the methods called so far, in order.
func (f *Controller) Methods() []string {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	var out []string
	for _, c := range f.Calls {
		out = append(out, c.Method[len("/csi.v1.Controller/"):])
	}
	return out
}

// The full names of the methods the volume loops call.
const (
	PublishMethod   = csipb.Controller_ControllerPublishVolume_FullMethodName
	UnpublishMethod = csipb.Controller_ControllerUnpublishVolume_FullMethodName
	ListMethod      = csipb.Controller_ListVolumes_FullMethodName
)

// EBSController and EBSNode are the plugin instances the tests report:
// a controller that publishes and lists published nodes, and a node
// instance that knows its node as "csi-<node>".
func EBSController(healthy bool) *pb.CSIPluginInfo {
	return &pb.CSIPluginInfo{Healthy: healthy, Provider: "ebs.csi.aws.com", ProviderVersion: "1.2", RequiresControllerPlugin: true, ControllerRequired: true,
		ControllerInfo: &pb.CSIControllerInfo{SupportsAttachDetach: true, SupportsListVolumes: true, SupportsListPublishedNodes: true}}
}

func EBSNode(node string) *pb.CSIPluginInfo {
	return &pb.CSIPluginInfo{Healthy: true, Provider: "ebs.csi.aws.com", ProviderVersion: "1.2", NodeInfo: &pb.CSINodeInfo{Id: "csi-" + node}}
}

// DescribeCalls lists calls as method@node.
func DescribeCalls(cs []Call) string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s@%s", c.Method, c.Node))
	}
	return fmt.Sprint(out)
}
