package fsm

import (
	"berth.dev/berth/internal/versions"
	"berth.dev/berth/rpc/pb"
)

// ApplyGate is a rule an apply decides from the replicated servers table
// (claimStateSince, pluginInstancesSince): it holds while every recorded
// server is at Since or later. Once it holds, the applies write what a
// server below Since does not know (a field it drops, a table it skips),
// so such a server must not join or be recorded again: it would apply the
// same log to a different state.
type ApplyGate struct {
	// Name is the gate's name in doc.go and ARCHITECTURE.
	Name string
	// Since is the first version at which the gate's rule is applied.
	Since string
	// Loses says what a server below Since gets wrong once it holds.
	Loses string
	c     versions.Constraint
}

// applyGates lists every in-apply gate.
var applyGates = []ApplyGate{
	{Name: "claimStateSince", Since: ClaimStateSinceVersion, Loses: "claims' state_entered_at", c: claimStateSince},
	{Name: "pluginInstancesSince", Since: PluginInstancesSinceVersion, Loses: "every CSI plugin's instances and allocations (csi_plugin_instances, csi_plugin_allocs) and what it derives from them", c: pluginInstancesSince},
}

// ApplyGatesRefusing returns the in-apply gates that hold in the servers
// table (every recorded server at the gate's version) and that a server
// of version does not satisfy (a server without a version satisfies
// none), in applyGates' order: the leader's check before it adds a
// server to raft or records it.
func (r reader) ApplyGatesRefusing(version string) ([]ApplyGate, error) {
	servers, err := serversTable.list(r, nil)
	if err != nil {
		return nil, err
	}
	var out []ApplyGate
	for _, g := range applyGates {
		if version != "" && g.c.Check(version) {
			continue
		}
		if serversAt(servers, g.c) {
			out = append(out, g)
		}
	}
	return out, nil
}

// serversAt reports whether every server recorded is at c (and at least
// one is): the rule stateSinceOn and pluginInstancesOn apply.
func serversAt(servers []*pb.ServerMember, c versions.Constraint) bool {
	for _, s := range servers {
		if s.GetVersion() == "" || !c.Check(s.GetVersion()) {
			return false
		}
	}
	return len(servers) > 0
}
