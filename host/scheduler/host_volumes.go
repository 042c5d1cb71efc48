package scheduler

import (
	"fmt"

	"berth.dev/berth/rpc/pb"
)

// Host volumes. A group volume of type "host" names a host volume a node
// offers (a host_volume block of its client's config, fingerprinted on
// pb.Node.host_volumes): a node property like a driver, so it is checked
// with the static feasibility and cached per run. A request that writes
// needs a host volume that is not read-only. A node without it is counted
// in constraint_filtered under a reason naming the group volume and the
// host volume, as CSI refusals are: `volume "data": no host volume
// "fast-disk" on the node`.

// hostAsk is one host volume a group's allocs need.
type hostAsk struct {
	name   string // the group's name for it
	source string // the node's host volume
	write  bool
}

// groupHostAsks returns tg's host volume requests in name order.
func groupHostAsks(tg *pb.TaskGroup) []hostAsk {
	var out []hostAsk
	for _, name := range sortedKeys(tg.GetVolumes()) {
		req := tg.GetVolumes()[name]
		if req.GetType() != "host" {
			continue
		}
		out = append(out, hostAsk{name: name, source: req.GetSource(), write: !req.GetReadOnly()})
	}
	return out
}

// hostVolumesMissing says why node n cannot serve asks, "" when it can.
func hostVolumesMissing(asks []hostAsk, n *pb.Node) string {
	for _, a := range asks {
		hv := n.GetHostVolumes()[a.source]
		switch {
		case hv == nil:
			return fmt.Sprintf("volume %q: no host volume %q on the node", a.name, a.source)
		case a.write && hv.GetReadOnly():
			return fmt.Sprintf("volume %q: host volume %q is read-only and the group writes to it (read_only = false)", a.name, a.source)
		}
	}
	return ""
}
