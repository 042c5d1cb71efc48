package pluginmanager

import (
	"maps"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

// Set is a node's CSI plugin set as the servers get it
// (CSIPlugins.UpdateNode): the controller and the node instances, each
// keyed by plugin ID. It is always the whole set; the servers replace the
// node's set with it.
type Set struct {
	Controllers map[string]*pb.CSIPluginInfo
	Nodes       map[string]*pb.CSIPluginInfo
}

func newSet() Set {
	return Set{Controllers: map[string]*pb.CSIPluginInfo{}, Nodes: map[string]*pb.CSIPluginInfo{}}
}

// side returns the map of the instances of type typ (controller or node).
func (s Set) side(typ pb.CSIPluginType) map[string]*pb.CSIPluginInfo {
	if typ == pb.CSIPluginType_CSI_PLUGIN_TYPE_CONTROLLER {
		return s.Controllers
	}
	return s.Nodes
}

// Equal reports whether s and o hold the same instances.
func (s Set) Equal(o Set) bool {
	eq := func(a, b *pb.CSIPluginInfo) bool { return proto.Equal(a, b) }
	return maps.EqualFunc(s.Controllers, o.Controllers, eq) && maps.EqualFunc(s.Nodes, o.Nodes, eq)
}

// Clone returns a deep copy, for a reader that may keep or change it.
func (s Set) Clone() Set {
	out := newSet()
	for id, info := range s.Controllers {
		out.Controllers[id] = proto.Clone(info).(*pb.CSIPluginInfo)
	}
	for id, info := range s.Nodes {
		out.Nodes[id] = proto.Clone(info).(*pb.CSIPluginInfo)
	}
	return out
}

// sides are the two maps of a Set, in the order they are built.
var sides = []pb.CSIPluginType{pb.CSIPluginType_CSI_PLUGIN_TYPE_CONTROLLER, pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE}
