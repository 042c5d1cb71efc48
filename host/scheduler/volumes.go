package scheduler

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/internal/rules"
	"berth.dev/berth/rpc/pb"
)

// Volumes. A group's `volume` blocks are claim requests: every alloc of
// the group needs one claim on each volume, and the plan carries those
// claims (plan.claims), so PlanApply reserves them in the apply that places
// the alloc. The scheduler checks, per candidate node, what the state
// machine's re-check does not: that the volume's plugin has a healthy node
// instance there, and the volume's topology; and, as the re-check does,
// the node plugin's max volumes, that a claim is free (rules.CheckClaim
// over the volume's claims plus the claims this plan already reserves),
// and that the volume's attachment to the node is not detaching.
// A node refused for a volume is counted in the AllocMetric's
// constraint_filtered under a reason naming the volume, so a blocked
// evaluation says why: `volume "data": no free claim (single-node-writer,
// claimed by alloc "…" on node "…", ready)`.
//
// A claim holds its volume until it is freed (releasing and node-detached
// claims count, internal/rules/claim.go), so an alloc that replaces a
// single-writer alloc (lost, migrated, rescheduled, updated) cannot be
// placed in the plan that stops the old one: it fails with that reason and
// its evaluation blocks, to be woken when the claim is freed
// (host/server's unblock watches the claims of the volumes blocked jobs
// need). A destructive update whose new alloc could never share the volume
// with the old one stops the old alloc anyway (volumeBlocksReplacement),
// since otherwise the update could never proceed.

// GroupVolumeIDs returns the IDs of every volume the group's allocs claim
// (per_alloc ones for indexes 0 to count-1), sorted and each once; the
// server's unblock path watches their claims.
func GroupVolumeIDs(tg *pb.TaskGroup) []string {
	seen := map[string]bool{}
	var ids []string
	add := func(id string) {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	for _, req := range tg.GetVolumes() {
		if !claimRequest(req) {
			continue
		}
		if !req.GetPerAlloc() {
			add(req.GetSource())
			continue
		}
		for i := int32(0); i < max(tg.GetCount(), 1); i++ {
			add(rules.VolumeID(req, i))
		}
	}
	sort.Strings(ids)
	return ids
}

// claimRequest reports whether a group volume is a claim: only CSI
// volumes are (the jobspec refuses other types).
func claimRequest(req *pb.VolumeRequest) bool {
	return req != nil && (req.GetType() == "" || req.GetType() == "csi")
}

// volumeAsk is one claim a placement needs.
type volumeAsk struct {
	// names are the group's names for the volume, sorted: more than one
	// when the group names one volume twice (a job registered over the
	// API before the jobspec refused it; see groupAsks).
	names []string
	id    string // the volume's ID
	mode  pb.ClaimMode
	// accessMode and attachmentMode are the request's words, "" for any.
	accessMode, attachmentMode string
	// conflict says why one claim cannot serve every name (they ask for
	// different access or attachment modes); no node takes the ask.
	conflict string
	// req is the request the claim carries (the first name's, writable
	// when any name writes), so its publish and release need no job.
	req *pb.VolumeRequest
	// host: a dynamic host volume (host_volumes.go), read from the
	// host_volumes table.
	host bool
}

// label names the volume in reasons: its ID, and the group's names for it
// when they differ.
func (a volumeAsk) label() string {
	switch {
	case len(a.names) == 1 && a.names[0] == a.id:
		return fmt.Sprintf("volume %q", a.id)
	case len(a.names) == 1:
		return fmt.Sprintf("volume %q (group volume %q)", a.id, a.names[0])
	}
	quoted := make([]string, len(a.names))
	for i, n := range a.names {
		quoted[i] = fmt.Sprintf("%q", n)
	}
	return fmt.Sprintf("volume %q (group volumes %s)", a.id, strings.Join(quoted, ", "))
}

// ClaimRequest returns the request a claim of volumeID by an alloc of tg
// at index carries, as placement sets it (the group's first name for the
// volume, writable when any of its names writes), and nil when the group
// asks for no such volume.
func ClaimRequest(tg *pb.TaskGroup, index int32, volumeID string) *pb.VolumeRequest {
	for _, a := range groupAsks(tg, index) {
		if a.id == volumeID {
			return a.req
		}
	}
	return nil
}

// groupAsks returns the claims an alloc of tg at index needs, one per
// volume, in the order of the group's names for them. The state machine
// holds one claim per (alloc, volume) and refuses a plan claiming one
// volume twice for an alloc as a whole, so group volumes that resolve to
// the same volume (the same source, or a per_alloc one beside the indexed
// volume it resolves to) make one ask: a write claim if any of them
// writes, with the access and attachment modes any of them names.
func groupAsks(tg *pb.TaskGroup, index int32) []volumeAsk {
	if len(tg.GetVolumes()) == 0 {
		return nil
	}
	var asks []volumeAsk
	at := map[string]int{}
	for _, name := range sortedKeys(tg.GetVolumes()) {
		req := tg.GetVolumes()[name]
		if !claimRequest(req) {
			continue
		}
		mode := pb.ClaimMode_CLAIM_MODE_WRITE
		if req.GetReadOnly() {
			mode = pb.ClaimMode_CLAIM_MODE_READ
		}
		id := rules.VolumeID(req, index)
		i, ok := at[id]
		if !ok {
			at[id] = len(asks)
			asks = append(asks, volumeAsk{names: []string{name}, id: id, mode: mode,
				accessMode: req.GetAccessMode(), attachmentMode: req.GetAttachmentMode(), req: req})
			continue
		}
		a := &asks[i]
		if mode == pb.ClaimMode_CLAIM_MODE_WRITE && a.mode != mode {
			a.mode = mode
			a.req = proto.CloneOf(a.req)
			a.req.ReadOnly = false
		}
		for _, f := range []struct {
			what string
			have *string
			want string
		}{
			{"access modes", &a.accessMode, req.GetAccessMode()},
			{"attachment modes", &a.attachmentMode, req.GetAttachmentMode()},
		} {
			switch {
			case f.want == "" || *f.have == f.want:
			case *f.have == "":
				*f.have = f.want
			case a.conflict == "":
				a.conflict = fmt.Sprintf("group volumes %q and %q name it with %s %q and %q; one claim has one",
					a.names[len(a.names)-1], name, f.what, *f.have, f.want)
			}
		}
		a.names = append(a.names, name)
	}
	return asks
}

// groupPerAlloc reports whether tg has a per_alloc volume: its allocs then
// need different volumes, so one failed placement says nothing of the next.
func groupPerAlloc(tg *pb.TaskGroup) bool {
	for _, v := range tg.GetVolumes() {
		if v.GetPerAlloc() {
			return true
		}
	}
	return false
}

// volEntry is one volume as this run sees it.
type volEntry struct {
	vol *pb.Volume // nil: not registered
	// held are the volume's stored claims, then the claims this plan
	// reserves on it.
	held []*pb.Claim
}

// volumeBook keeps the volumes and claims one run reads, plus the claims
// its plan adds, so every placement is checked against the ones before it.
type volumeBook struct {
	st   State
	vols map[string]*volEntry
	// onNode is, per node loaded, the volumes claimed there by plugin:
	// what a node plugin's max_volumes counts.
	onNode map[string]map[string]map[string]bool
	// detach caches, by (volume, node), whether that attachment is
	// detaching.
	detach map[[2]string]bool
}

func newVolumeBook(st State) *volumeBook {
	return &volumeBook{st: st, vols: map[string]*volEntry{}, onNode: map[string]map[string]map[string]bool{},
		detach: map[[2]string]bool{}}
}

// entry loads a volume and its claims on first use.
func (b *volumeBook) entry(id string) (*volEntry, error) {
	if e := b.vols[id]; e != nil {
		return e, nil
	}
	v, err := b.st.Volume(id)
	if err != nil {
		return nil, &StateError{What: "volume " + id, Err: err}
	}
	e := &volEntry{vol: v}
	if v != nil {
		held, err := b.st.ClaimsByVolume(id)
		if err != nil {
			return nil, &StateError{What: "claims of volume " + id, Err: err}
		}
		e.held = append([]*pb.Claim(nil), held...)
	}
	b.vols[id] = e
	return e, nil
}

// nodeVolumes loads the volumes claimed on a node, by plugin.
func (b *volumeBook) nodeVolumes(nodeID string) (map[string]map[string]bool, error) {
	if m := b.onNode[nodeID]; m != nil {
		return m, nil
	}
	claims, err := b.st.ClaimsByNode(nodeID)
	if err != nil {
		return nil, &StateError{What: "claims on node " + nodeID, Err: err}
	}
	m := map[string]map[string]bool{}
	for _, c := range claims {
		e, err := b.entry(c.GetVolumeId())
		if err != nil {
			return nil, err
		}
		plugin := e.vol.GetPluginId()
		if m[plugin] == nil {
			m[plugin] = map[string]bool{}
		}
		m[plugin][c.GetVolumeId()] = true
	}
	b.onNode[nodeID] = m
	return m, nil
}

// check returns why node n cannot take claims for asks, "" when it can.
// The asks are one alloc's: a node plugin's max_volumes counts the
// volumes the earlier asks would add to the node as well.
func (b *volumeBook) check(n *pb.Node, asks []volumeAsk) (string, error) {
	var own map[string]map[string]bool // plugin -> volumes of earlier asks
	for _, ask := range asks {
		why, err := b.checkOne(n, ask, own)
		if err != nil || why != "" {
			return why, err
		}
		if len(asks) == 1 {
			break
		}
		if own == nil {
			own = map[string]map[string]bool{}
		}
		plugin := b.vols[ask.id].vol.GetPluginId()
		if own[plugin] == nil {
			own[plugin] = map[string]bool{}
		}
		own[plugin][ask.id] = true
	}
	return "", nil
}

func (b *volumeBook) checkOne(n *pb.Node, ask volumeAsk, own map[string]map[string]bool) (string, error) {
	e, err := b.entry(ask.id)
	if err != nil {
		return "", err
	}
	v := e.vol
	switch {
	case ask.conflict != "":
		return ask.label() + ": " + ask.conflict, nil
	case v == nil:
		return ask.label() + ": no such volume is registered", nil
	case !v.GetSchedulable():
		return fmt.Sprintf("%s: plugin %q is not schedulable", ask.label(), v.GetPluginId()), nil
	}
	info := n.GetCsiNodePlugins()[v.GetPluginId()]
	switch {
	case info == nil:
		return fmt.Sprintf("%s: no node instance of plugin %q", ask.label(), v.GetPluginId()), nil
	case !info.GetHealthy():
		return fmt.Sprintf("%s: node plugin %q is unhealthy", ask.label(), v.GetPluginId()), nil
	case !TopologyReaches(v, info):
		return fmt.Sprintf("%s: not accessible from the node's topology", ask.label()), nil
	}
	detaching, err := b.detaching(v.GetId(), n.GetId())
	if err != nil {
		return "", err
	}
	if detaching {
		// The state machine refuses a claim beside a detaching attachment
		// (one attachment per volume and node, and it is being
		// unpublished); choosing the node anyway would have the plan
		// refused on every try. As a node reason it blocks the evaluation,
		// which the attachment's removal wakes.
		return ask.label() + ": the volume is detaching from the node (controller unpublish under way)", nil
	}
	capability, why := pickCapability(v, e.held, ask)
	if why != "" {
		return ask.label() + ": " + why, nil
	}
	if maxVols := info.GetNodeInfo().GetMaxVolumes(); maxVols > 0 {
		onNode, err := b.nodeVolumes(n.GetId())
		if err != nil {
			return "", err
		}
		vols, mine := onNode[v.GetPluginId()], own[v.GetPluginId()]
		count := len(vols)
		for id := range mine {
			if !vols[id] {
				count++
			}
		}
		if !vols[v.GetId()] && !mine[v.GetId()] && int64(count) >= maxVols {
			why := fmt.Sprintf("%s: node plugin %q holds its max of %d volumes", ask.label(), v.GetPluginId(), maxVols)
			if count > len(vols) {
				why += " with the alloc's other volumes of that plugin"
			}
			return why, nil
		}
	}
	c := &pb.Claim{VolumeId: v.GetId(), NodeId: n.GetId(), Mode: ask.mode,
		AccessMode: capability.GetAccessMode(), AttachmentMode: capability.GetAttachmentMode()}
	if err := rules.CheckClaim(v, e.held, c); err != nil {
		return ask.label() + ": " + claimRefusal(v, e.held, c, err), nil
	}
	return "", nil
}

// detaching reports whether the volume's attachment to the node is
// detaching, reading each (volume, node) once per run: no claim this run
// adds changes it (the state machine refuses one on such a node).
func (b *volumeBook) detaching(volumeID, nodeID string) (bool, error) {
	k := [2]string{volumeID, nodeID}
	if d, ok := b.detach[k]; ok {
		return d, nil
	}
	a, err := b.st.Attachment(volumeID, nodeID)
	if err != nil {
		return false, &StateError{What: fmt.Sprintf("attachment of volume %s to node %s", volumeID, nodeID), Err: err}
	}
	d := a.GetState() == pb.AttachmentState_ATTACHMENT_STATE_DETACHING
	b.detach[k] = d
	return d, nil
}

// claimRefusal words rules.CheckClaim's refusal without the candidate node, so
// every node refused for the same claim counts under one reason: the
// access mode and the claim in the way.
func claimRefusal(v *pb.Volume, held []*pb.Claim, c *pb.Claim, err error) string {
	mode := pb.EnumWord(c.GetAccessMode())
	if errors.Is(err, rules.ErrVolumeDeleting) {
		return "the volume is being deleted"
	}
	if !errors.Is(err, rules.ErrNoFreeClaim) {
		return fmt.Sprintf("cannot claim it as %s", mode)
	}
	for _, h := range held {
		if rules.CheckClaim(v, []*pb.Claim{h}, c) != nil {
			return fmt.Sprintf("no free claim (%s, claimed by %s on node %q, %s%s)",
				mode, rules.Claimant(h), h.GetNodeId(), pb.EnumWord(h.GetState()), keptBy(held, h))
		}
	}
	return fmt.Sprintf("no free claim (%s, %d claims held)", mode, len(held))
}

// keptBy says why a node-detached claim h still holds its volume when live
// claims on its node keep the node's attachment: a write claim of a
// multi-node mode stays until that attachment, published writable for it,
// is unpublished (fsm's freeBesideLive), which waits for them all to go.
// Without this the claim looks stuck; with it the operator sees whom to
// stop (or to place the writer beside).
func keptBy(held []*pb.Claim, h *pb.Claim) string {
	if h.GetState() != pb.ClaimState_CLAIM_STATE_NODE_DETACHED {
		return ""
	}
	var users []string
	for _, o := range held {
		if o != h && o.GetNodeId() == h.GetNodeId() && rules.ClaimLive(o) {
			users = append(users, rules.Claimant(o))
		}
	}
	if len(users) == 0 {
		return ""
	}
	const shown = 3
	more := ""
	if len(users) > shown {
		more = fmt.Sprintf(" and %d more", len(users)-shown)
		users = users[:shown]
	}
	return fmt.Sprintf("; kept until the node's attachment is unpublished, which %s%s there still use", strings.Join(users, ", "), more)
}

// reserve adds the claims alloc a needs to the plan and to the book.
func (b *volumeBook) reserve(s *sched, a *pb.Allocation, asks []volumeAsk) {
	for _, ask := range asks {
		e := b.vols[ask.id]
		capability, _ := pickCapability(e.vol, e.held, ask)
		c := &pb.Claim{
			Id:             s.opts.NewID(),
			VolumeId:       ask.id,
			AllocId:        a.GetId(),
			NodeId:         a.GetNodeId(),
			Mode:           ask.mode,
			AccessMode:     capability.GetAccessMode(),
			AttachmentMode: capability.GetAttachmentMode(),
			Request:        ask.req,
			// What the plan command stores it as until it decides ready;
			// a later placement's refusal names it by this state.
			State:     pb.ClaimState_CLAIM_STATE_RESERVED,
			CreatedAt: s.opts.Now,
		}
		s.plan.Claims = append(s.plan.Claims, c)
		e.held = append(e.held, c)
		if m := b.onNode[a.GetNodeId()]; m != nil {
			plugin := e.vol.GetPluginId()
			if m[plugin] == nil {
				m[plugin] = map[string]bool{}
			}
			m[plugin][ask.id] = true
		}
	}
}

// blocksReplacement reports whether prev holds a claim that a new alloc
// needing asks could never share, even on prev's node: its replacement
// then waits until prev stops and its claim is freed.
func (b *volumeBook) blocksReplacement(prev *pb.Allocation, asks []volumeAsk) (bool, error) {
	for _, ask := range asks {
		e, err := b.entry(ask.id)
		if ask.host {
			e, _, err = b.hostEntry(ask.id)
		}
		if err != nil {
			return false, err
		}
		if e.vol == nil {
			continue
		}
		for _, h := range e.held {
			if h.GetAllocId() != prev.GetId() {
				continue
			}
			capability, why := pickCapability(e.vol, []*pb.Claim{h}, ask)
			if why != "" {
				return true, nil
			}
			c := &pb.Claim{VolumeId: ask.id, NodeId: prev.GetNodeId(), Mode: ask.mode,
				AccessMode: capability.GetAccessMode(), AttachmentMode: capability.GetAttachmentMode()}
			if rules.CheckClaim(e.vol, []*pb.Claim{h}, c) != nil {
				return true, nil
			}
		}
	}
	return false, nil
}

// pickCapability chooses the volume capability a claim of ask uses: one
// matching the request's access and attachment modes where it names them,
// that allows writing for a write claim; among those, the access mode the
// volume's claims already use (every claim of a volume shares it), else the
// first the volume lists. why says what is missing when none fits.
func pickCapability(v *pb.Volume, held []*pb.Claim, ask volumeAsk) (*pb.VolumeCapability, string) {
	var fits []*pb.VolumeCapability
	for _, c := range v.GetCapabilities() {
		if ask.accessMode != "" && pb.EnumWord(c.GetAccessMode()) != ask.accessMode {
			continue
		}
		if ask.attachmentMode != "" && pb.EnumWord(c.GetAttachmentMode()) != ask.attachmentMode {
			continue
		}
		limits, ok := rules.AccessModeLimitsOf(c.GetAccessMode())
		if !ok || (ask.mode == pb.ClaimMode_CLAIM_MODE_WRITE && !limits.Write) {
			continue
		}
		fits = append(fits, c)
	}
	if len(fits) == 0 {
		want := "a writable capability"
		if ask.mode == pb.ClaimMode_CLAIM_MODE_READ {
			want = "a capability"
		}
		if m := ask.accessMode; m != "" {
			want += " " + m
		}
		if m := ask.attachmentMode; m != "" {
			want += " " + m
		}
		return nil, fmt.Sprintf("the volume has no %s (it offers %s)", want, capabilitiesText(v))
	}
	if len(held) > 0 {
		for _, c := range fits {
			if c.GetAccessMode() == held[0].GetAccessMode() {
				return c, ""
			}
		}
	}
	return fits[0], ""
}

func capabilitiesText(v *pb.Volume) string {
	out := ""
	for i, c := range v.GetCapabilities() {
		if i > 0 {
			out += ", "
		}
		out += pb.EnumWord(c.GetAccessMode()) + "/" + pb.EnumWord(c.GetAttachmentMode())
	}
	if out == "" {
		return "none"
	}
	return out
}

// TopologyReaches reports whether the volume is reachable from the node
// the plugin instance runs on: some topology of the volume's (its
// accessible topology, or for a volume that reports none, its required
// topology request) whose every segment the node instance reports with the
// same value. A volume with neither is reachable everywhere.
func TopologyReaches(v *pb.Volume, info *pb.CSIPluginInfo) bool {
	tops := v.GetAccessibleTopology()
	if len(tops) == 0 {
		tops = v.GetTopologyRequest().GetRequired()
	}
	if len(tops) == 0 {
		return true
	}
	have := info.GetNodeInfo().GetAccessibleTopology()
	for _, t := range tops {
		ok := true
		for k, want := range t.GetSegments() {
			if got, found := have[k]; !found || got != want {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}
