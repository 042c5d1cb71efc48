package scheduler

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/internal/rules"
	"berth.dev/berth/rpc/pb"
)

// Host volumes. A group volume of type "host" names a host volume a node
// offers by name (pb.Node.host_volumes, as its client fingerprints them):
// a static one (a host_volume block of the client's config) or a dynamic
// one (`volume create` of type "host", recorded in the host_volumes table,
// its ID in the fingerprint). That the node has it is a node property like
// a driver, so it is checked with the static feasibility and cached per
// run; a static one must not be read-only for a group that writes. A
// dynamic one is claimed like a CSI volume: the claim is checked per visit
// (rules.CheckClaim over its claims plus the plan's) and travels with the
// placement, so a single-node-single-writer volume is never given to two
// allocs. A node refused is counted in constraint_filtered under a reason
// naming the group volume and the host volume, as CSI refusals are:
// `volume "data": no host volume "fast-disk" on the node`.

// hostAsk is one host volume a group's allocs need.
type hostAsk struct {
	name   string // the group's name for it
	source string // the node's host volume
	write  bool
	req    *pb.VolumeRequest
}

// groupHostAsks returns tg's host volume requests in name order.
func groupHostAsks(tg *pb.TaskGroup) []hostAsk {
	var out []hostAsk
	for _, name := range sortedKeys(tg.GetVolumes()) {
		req := tg.GetVolumes()[name]
		if req.GetType() != "host" {
			continue
		}
		out = append(out, hostAsk{name: name, source: req.GetSource(), write: !req.GetReadOnly(), req: req})
	}
	return out
}

// GroupHostVolumeNames returns the host volumes (by the name nodes offer
// them under) tg's group volumes of type "host" name, sorted, once each:
// what a blocked evaluation of tg waits on besides CSI volumes
// (GroupVolumeIDs), whose dynamic ones the host_volumes table holds.
func GroupHostVolumeNames(tg *pb.TaskGroup) []string {
	var out []string
	for _, a := range groupHostAsks(tg) {
		if !slices.Contains(out, a.source) {
			out = append(out, a.source)
		}
	}
	slices.Sort(out)
	return out
}

// hostVolumesMissing says why node n cannot serve asks, "" when it can.
func hostVolumesMissing(asks []hostAsk, n *pb.Node) string {
	for _, a := range asks {
		hv := n.GetHostVolumes()[a.source]
		switch {
		case hv == nil:
			return fmt.Sprintf("volume %q: no host volume %q on the node", a.name, a.source)
		case hv.GetId() == "" && a.write && hv.GetReadOnly():
			return fmt.Sprintf("volume %q: host volume %q is read-only and the group writes to it (read_only = false)", a.name, a.source)
		}
	}
	return ""
}

// dynamicAsks are the claims an alloc of a group with host volume asks
// needs on node n: one per dynamic host volume of n the group names. Two
// group volumes naming one volume make one claim (an alloc holds one claim
// per volume, as groupAsks does for CSI): writing when either writes,
// with a conflict when they ask for different access or attachment modes.
func dynamicAsks(asks []hostAsk, n *pb.Node) []volumeAsk {
	var out []volumeAsk
	at := map[string]int{}
	for _, a := range asks {
		hv := n.GetHostVolumes()[a.source]
		if hv.GetId() == "" {
			continue
		}
		mode := pb.ClaimMode_CLAIM_MODE_READ
		if a.write {
			mode = pb.ClaimMode_CLAIM_MODE_WRITE
		}
		i, ok := at[hv.GetId()]
		if !ok {
			at[hv.GetId()] = len(out)
			out = append(out, volumeAsk{names: []string{a.name}, id: hv.GetId(), mode: mode,
				accessMode: a.req.GetAccessMode(), attachmentMode: a.req.GetAttachmentMode(), req: a.req, host: true})
			continue
		}
		m := &out[i]
		if mode == pb.ClaimMode_CLAIM_MODE_WRITE && m.mode != mode {
			m.mode = mode
			m.req = proto.CloneOf(m.req)
			m.req.ReadOnly = false
		}
		for _, f := range []struct {
			what string
			have *string
			want string
		}{
			{"access modes", &m.accessMode, a.req.GetAccessMode()},
			{"attachment modes", &m.attachmentMode, a.req.GetAttachmentMode()},
		} {
			switch {
			case f.want == "" || *f.have == f.want:
			case *f.have == "":
				*f.have = f.want
			case m.conflict == "":
				m.conflict = fmt.Sprintf("group volumes %q and %q name it with %s %q and %q; one claim has one",
					m.names[len(m.names)-1], a.name, f.what, *f.have, f.want)
			}
		}
		m.names = append(m.names, a.name)
	}
	return out
}

// hostEntry loads a dynamic host volume (as rules.HostVolumeClaimView)
// and its claims on first use.
func (b *volumeBook) hostEntry(id string) (*volEntry, *pb.HostVolume, error) {
	hv, err := b.st.HostVolume(id)
	if err != nil {
		return nil, nil, &StateError{What: "host volume " + id, Err: err}
	}
	// An entry without a volume may be entry's, made while counting the
	// node's claims (it reads only the CSI table).
	if e := b.vols[id]; e != nil && (e.vol != nil || hv == nil) {
		return e, hv, nil
	}
	e := &volEntry{}
	if hv != nil {
		e.vol = rules.HostVolumeClaimView(hv)
		held, err := b.st.ClaimsByVolume(id)
		if err != nil {
			return nil, nil, &StateError{What: "claims of host volume " + id, Err: err}
		}
		e.held = append([]*pb.Claim(nil), held...)
	}
	b.vols[id] = e
	return e, hv, nil
}

// checkHost returns why node n cannot take the dynamic host volume claims
// asks, "" when it can.
func (b *volumeBook) checkHost(n *pb.Node, asks []volumeAsk) (string, error) {
	for _, ask := range asks {
		e, hv, err := b.hostEntry(ask.id)
		if err != nil {
			return "", err
		}
		label := fmt.Sprintf("volume %q (host volume %q, %s)", ask.names[0], ask.req.GetSource(), ask.id)
		switch {
		case ask.conflict != "":
			return label + ": " + ask.conflict, nil
		case hv == nil:
			return label + ": not recorded by the servers (deleted, or not yet created)", nil
		case hv.GetNodeId() != n.GetId():
			return fmt.Sprintf("%s: recorded on node %s, not this one", label, hv.GetNodeId()), nil
		case hv.GetState() == pb.HostVolumeState_HOST_VOLUME_STATE_PENDING:
			return label + ": pending (its node has not made it yet)", nil
		}
		capability, why := pickCapability(e.vol, e.held, ask)
		if why != "" {
			return label + ": " + why, nil
		}
		c := &pb.Claim{VolumeId: ask.id, NodeId: n.GetId(), Mode: ask.mode,
			AccessMode: capability.GetAccessMode(), AttachmentMode: capability.GetAttachmentMode()}
		if err := rules.CheckClaim(e.vol, e.held, c); err != nil {
			return label + ": " + claimRefusal(e.vol, e.held, c, err), nil
		}
	}
	return "", nil
}

// placedAsks are the claims an alloc placed on n needs: asks (its CSI
// volumes) and the dynamic host volumes of n it asks for.
func (g *groupCtx) placedAsks(asks []volumeAsk, n *pb.Node) []volumeAsk {
	dyn := dynamicAsks(g.hostVols, n)
	if len(dyn) == 0 {
		return asks
	}
	return append(append([]volumeAsk(nil), asks...), dyn...)
}

// prevAsks are the claims a destructive update's new alloc would need on
// the node of the alloc it replaces (its dynamic host volumes are that
// node's), for keepOrStop.
func (s *sched) prevAsks(g *groupCtx, prev *pb.Allocation, asks []volumeAsk) []volumeAsk {
	if len(g.hostVols) == 0 {
		return asks
	}
	n, err := s.st.Node(prev.GetNodeId())
	if err != nil || n == nil {
		return asks
	}
	return g.placedAsks(asks, n)
}

// NodeSatisfies reports whether node n satisfies every constraint of cs
// (distinct_hosts aside), and names the first it does not: what `volume
// create` of a dynamic host volume chooses its node by.
func NodeSatisfies(n *pb.Node, cs []*pb.Constraint) (bool, string) {
	m := newMatcher()
	for _, c := range cs {
		if !m.check(c, n) {
			return false, ConstraintString(c)
		}
	}
	return true, ""
}

// stickTo is where a replacement of prev must go for its group's sticky
// host volumes: prev's node, and there the dynamic volumes prev claimed
// (by group volume name). Zero: anywhere.
type stickTo struct {
	node string
	vols map[string]string
}

// stickyTarget is what g's sticky host volumes ask of a replacement of
// prev (nil prev: a new alloc goes anywhere).
func stickyTarget(g *groupCtx, prev *pb.Allocation) stickTo {
	if prev == nil || prev.GetNodeId() == "" {
		return stickTo{}
	}
	var st stickTo
	for _, a := range g.hostVols {
		if !a.req.GetSticky() {
			continue
		}
		st.node = prev.GetNodeId()
		if id := prev.GetHostVolumeIds()[a.name]; id != "" {
			if st.vols == nil {
				st.vols = map[string]string{}
			}
			st.vols[a.name] = id
		}
	}
	return st
}

// refuses says why node n breaks the stickiness, "" when it keeps it.
func (st stickTo) refuses(g *groupCtx, n *pb.Node) string {
	if st.node == "" {
		return ""
	}
	if n.GetId() != st.node {
		for _, a := range g.hostVols {
			if a.req.GetSticky() {
				return fmt.Sprintf("volume %q: sticky to node %s, where the alloc it replaces ran", a.name, st.node)
			}
		}
	}
	for _, a := range g.hostVols {
		want := st.vols[a.name]
		if have := n.GetHostVolumes()[a.source].GetId(); want != "" && have != want {
			return fmt.Sprintf("volume %q: sticky to host volume %s, which the node no longer offers as %q", a.name, want, a.source)
		}
	}
	return ""
}

// recordHostVolumes notes on a the dynamic host volumes it claims, by
// group volume name, for a sticky replacement.
func recordHostVolumes(a *pb.Allocation, asks []volumeAsk) {
	for _, ask := range asks {
		if !ask.host {
			continue
		}
		if a.HostVolumeIds == nil {
			a.HostVolumeIds = map[string]string{}
		}
		a.HostVolumeIds[ask.names[0]] = ask.id
	}
}
