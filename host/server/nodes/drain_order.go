package nodes

import (
	"fmt"
	"slices"
	"sort"

	"berth.dev/berth/internal/rules"

	"github.com/hashicorp/go-memdb"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// The order in which a drain stops a node's allocs (DESIGN "How data
// flows", step 5): a CSI plugin alloc serves the stage and publish of
// every volume on its node, and only a running plugin can unpublish and
// unstage them. Stopped before its users have torn their volumes down,
// it would leave them staged for good. So:
//
//  1. service and batch allocs that run no plugin, volume users among
//     them, are marked at once (their replacements need not wait);
//  2. an alloc that runs a csi_plugin task is held while anything on the
//     node still needs one of its plugins: a live alloc whose group asks
//     for a volume of that plugin, or a claim of such a volume on the node
//     that is not node-detached yet — the client reports an alloc
//     complete before its postrun hooks unpublish, and node-detached once
//     they did (an operator's claim holds the plugin too);
//  3. system allocs follow once every service and batch alloc has
//     stopped on its client, plugins among them not counted while held (a
//     system job may use a volume of a plugin run by a service job).
//
// At the drain's deadline everything left is marked, plugins in a second
// write after the rest: nothing waits any more, but the plugins' jobs are
// evaluated after the others', the one order left to keep.

// anyPlugin keys the holders of a volume whose plugin is unknown (the
// volume is not stored): they hold every plugin alloc of the node.
const anyPlugin = ""

// drainAlloc is one alloc still running on a draining node.
type drainAlloc struct {
	alloc  *pb.Allocation
	system bool
	// plugins are the IDs of the CSI plugins its tasks run.
	plugins []string
	// marked: the servers already stopped it or marked it to migrate.
	marked bool
}

// drainNode is what the drainer knows of one draining node.
type drainNode struct {
	live []*drainAlloc
	// holders maps a plugin ID (or anyPlugin) to what needs the plugin on
	// the node: alloc IDs, and "claim <id>" for an operator's claim.
	holders map[string]map[string]bool
}

// drainPlan is what to do on a draining node now.
type drainPlan struct {
	// mark is to be marked first, plugins after it (in a later write).
	mark, plugins []*pb.Allocation
	// held maps the plugin allocs waiting for their volumes' users to
	// what they wait for.
	held map[string][]string
	// cycle are plugin allocs released although something still holds
	// them: their holders are plugin allocs holding each other, which
	// would otherwise wait for the deadline (or forever).
	cycle []string
	// done: nothing is left running on the node.
	done bool
}

// readDrainNode reads node n's allocs and claims from snap (adding the
// allocs and claims to ws). System allocs are left out when the drain
// ignores them: they keep running, and their claims do not hold a plugin,
// which would otherwise hold the drain until its deadline.
func readDrainNode(snap *fsm.StateSnapshot, ws memdb.WatchSet, n *pb.Node, jobOf func(string) *pb.Job) (*drainNode, error) {
	allocs, err := snap.AllocsByNode(ws, n.GetId())
	if err != nil {
		return nil, fmt.Errorf("reading the allocs of node %s: %w", n.GetId(), err)
	}
	claims, err := snap.ClaimsByNode(ws, n.GetId())
	if err != nil {
		return nil, fmt.Errorf("reading the claims on node %s: %w", n.GetId(), err)
	}
	ignoreSystem := n.GetDrain().GetIgnoreSystemJobs()
	dn := &drainNode{holders: map[string]map[string]bool{}}
	plugins := map[string]string{}
	pluginOf := func(volumeID string) string {
		if p, ok := plugins[volumeID]; ok {
			return p
		}
		v, _ := snap.VolumeByID(nil, volumeID)
		p := anyPlugin
		if v != nil {
			p = v.GetPluginId()
		}
		plugins[volumeID] = p
		return p
	}
	ignored := map[string]bool{}
	for _, a := range allocs {
		if rules.AllocClientTerminal(a) {
			continue
		}
		system := jobOf(a.GetJobId()).GetType() == pb.JobType_JOB_TYPE_SYSTEM
		if system && ignoreSystem {
			ignored[a.GetId()] = true
			continue
		}
		da := &drainAlloc{alloc: a, system: system,
			marked: rules.AllocServerTerminal(a) || a.GetDesiredTransition().GetMigrate()}
		tg := allocGroup(snap, a, jobOf)
		for _, t := range tg.GetTasks() {
			if id := t.GetCsiPlugin().GetId(); id != "" && !slices.Contains(da.plugins, id) {
				da.plugins = append(da.plugins, id)
			}
		}
		for _, req := range tg.GetVolumes() {
			if req.GetType() != "" && req.GetType() != "csi" {
				continue
			}
			dn.hold(pluginOf(rules.VolumeID(req, a.GetIndex())), a.GetId())
		}
		dn.live = append(dn.live, da)
	}
	for _, c := range claims {
		if c.GetState() >= pb.ClaimState_CLAIM_STATE_NODE_DETACHED || ignored[c.GetAllocId()] {
			continue
		}
		holder := c.GetAllocId()
		if c.GetOperator() || holder == "" {
			holder = "claim " + c.GetId()
		}
		dn.hold(pluginOf(c.GetVolumeId()), holder)
	}
	return dn, nil
}

func (dn *drainNode) hold(plugin, holder string) {
	if dn.holders[plugin] == nil {
		dn.holders[plugin] = map[string]bool{}
	}
	dn.holders[plugin][holder] = true
}

// allocGroup returns the group alloc a runs, from the job version it runs
// (the current one when that version is no longer kept), or nil.
func allocGroup(snap *fsm.StateSnapshot, a *pb.Allocation, jobOf func(string) *pb.Job) *pb.TaskGroup {
	job, _ := snap.JobVersion(nil, a.GetJobId(), a.GetJobVersion())
	if job == nil {
		job = jobOf(a.GetJobId())
	}
	for _, tg := range job.GetGroups() {
		if tg.GetName() == a.GetTaskGroup() {
			return tg
		}
	}
	return nil
}

// holdersOf returns what holds plugin alloc a on the node, itself aside,
// sorted.
func (dn *drainNode) holdersOf(a *drainAlloc) []string {
	set := map[string]bool{}
	for _, p := range append([]string{anyPlugin}, a.plugins...) {
		for h := range dn.holders[p] {
			if h != a.alloc.GetId() {
				set[h] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for h := range set {
		out = append(out, h)
	}
	sort.Strings(out)
	return out
}

// plan decides what to mark now; forced (the deadline passed) marks
// everything left.
func (dn *drainNode) plan(forced bool) drainPlan {
	p := drainPlan{done: len(dn.live) == 0, held: map[string][]string{}}
	if !forced {
		for _, a := range dn.live {
			if len(a.plugins) == 0 || a.marked {
				continue
			}
			if hs := dn.holdersOf(a); len(hs) > 0 {
				p.held[a.alloc.GetId()] = hs
			}
		}
		p.cycle = releaseCycles(p.held)
	}
	// A system alloc waits for the service and batch allocs, except for
	// the held plugins: one of them may be waiting for it.
	systemReady := true
	for _, a := range dn.live {
		if _, held := p.held[a.alloc.GetId()]; !a.system && !held {
			systemReady = false
			break
		}
	}
	for _, a := range dn.live {
		_, held := p.held[a.alloc.GetId()]
		switch {
		case a.marked, held:
		case a.system && !systemReady && !forced:
		case len(a.plugins) > 0:
			p.plugins = append(p.plugins, a.alloc)
		default:
			p.mark = append(p.mark, a.alloc)
		}
	}
	return p
}

// releaseCycles takes out of held (plugin alloc ID → what holds it) the
// plugin allocs on a cycle of holds — two plugins using each other's
// volumes — which only the deadline would ever release otherwise, and
// returns their IDs, sorted. Everything else that holds a plugin moves on
// by itself: a live alloc that is not held gets marked (a system alloc
// once only held plugins are left, a marked one is stopping), a claim is
// torn down by its client; so a plugin held only through such holders,
// directly or down a chain of held plugins, waits its turn. A plugin held
// by a cycle without being on it waits for the cycle's plugins to stop.
func releaseCycles(held map[string][]string) []string {
	moves := map[string]bool{}
	for changed := true; changed; {
		changed = false
		for id, holders := range held {
			if moves[id] {
				continue
			}
			all := true
			for _, h := range holders {
				if _, isHeld := held[h]; isHeld && !moves[h] {
					all = false
					break
				}
			}
			if all {
				moves[id] = true
				changed = true
			}
		}
	}
	// Every stuck plugin has a stuck holder, so following holders from one
	// always ends in a cycle; release only the plugins on one.
	onCycle := func(start string) bool {
		seen := map[string]bool{}
		next := []string{start}
		for len(next) > 0 {
			id := next[len(next)-1]
			next = next[:len(next)-1]
			for _, h := range held[id] {
				if _, isHeld := held[h]; !isHeld || moves[h] {
					continue
				}
				if h == start {
					return true
				}
				if !seen[h] {
					seen[h] = true
					next = append(next, h)
				}
			}
		}
		return false
	}
	var cycle []string
	for id := range held {
		if !moves[id] && onCycle(id) {
			cycle = append(cycle, id)
		}
	}
	for _, id := range cycle {
		delete(held, id)
	}
	sort.Strings(cycle)
	return cycle
}
