package scheduler

import (
	"sort"

	"berth.dev/berth/internal/rules"
	"berth.dev/berth/rpc/pb"
)

// occupant kinds, in the order that wins an index held twice.
const (
	occLive    = iota // running or pending, kept (maybe updated)
	occReplace        // to be placed again, replacing prev
	occWaiting        // failed, waiting for its reschedule delay
	occDone           // holds its index without running: batch complete, failed for good, stopped with no_replace
)

// occupant is something that holds (or will hold) one index of a group.
type occupant struct {
	kind  int
	index int32
	alloc *pb.Allocation // the live alloc, or the one being replaced
	// for occReplace: why, and the reschedule event to record.
	reschedule bool
	delayMS    int64
	// stopOld: the old alloc is stopped only if its replacement is placed
	// (a failed alloc being rescheduled).
	stopOld bool
	// countPlace: annotate the replacement as a placement (lost, migrate
	// and reschedule have counters of their own).
	countPlace bool
}

// placement is one alloc to place.
type placement struct {
	tg     *pb.TaskGroup
	index  int32
	prev   *pb.Allocation
	occ    *occupant
	update bool // destructive update: prev stops only if this is placed
}

// generic reconciles a service or batch job's allocs against its groups.
func (s *sched) generic(batch bool) error {
	allocs, err := s.st.AllocsByJob(s.eval.GetJobId())
	if err != nil {
		return &StateError{What: "allocs of job " + s.eval.GetJobId(), Err: err}
	}
	s.pl.track(allocs)
	if s.job == nil || s.job.GetStop() {
		for _, a := range allocs {
			if !rules.AllocServerTerminal(a) {
				s.stop(a, DescJobStopped, false)
				s.annotation(a.GetTaskGroup()).Stop++
			}
		}
		return nil
	}
	byGroup := map[string][]*pb.Allocation{}
	groups := map[string]*pb.TaskGroup{}
	for _, g := range s.job.GetGroups() {
		groups[g.GetName()] = g
	}
	// An alloc is replaced once some alloc names it as previous_allocation
	// (or it names its next): its index is held by the replacement.
	replaced := map[string]bool{}
	for _, a := range allocs {
		if p := a.GetPreviousAllocation(); p != "" {
			replaced[p] = true
		}
	}
	for _, a := range allocs {
		if a.GetNextAllocation() != "" {
			replaced[a.GetId()] = true
		}
		if groups[a.GetTaskGroup()] == nil {
			if !rules.AllocServerTerminal(a) {
				s.stop(a, DescGroupRemoved, false)
				s.annotation(a.GetTaskGroup()).Stop++
			}
			continue
		}
		byGroup[a.GetTaskGroup()] = append(byGroup[a.GetTaskGroup()], a)
	}
	var places, updates []placement
	var waiting []delayed
	for _, tg := range s.job.GetGroups() {
		p, u, w, err := s.reconcileGroup(batch, tg, byGroup[tg.GetName()], replaced)
		if err != nil {
			return err
		}
		places, updates, waiting = append(places, p...), append(updates, u...), append(waiting, w...)
	}
	s.scheduleDelayed(waiting)
	// Plain placements first, destructive updates after: an update that
	// finds no room leaves its old alloc running, a missing alloc has no
	// such fallback.
	for _, p := range append(places, updates...) {
		if err := s.placeOne(p); err != nil {
			return err
		}
	}
	return nil
}

// reconcileGroup decides a group's stops, in-place updates, placements and
// delayed reschedules. Stops are applied to the plan at once; placements
// are returned, to be made after every group's stops.
func (s *sched) reconcileGroup(batch bool, tg *pb.TaskGroup, allocs []*pb.Allocation, replaced map[string]bool) (places, updates []placement, waiting []delayed, err error) {
	ann := s.annotation(tg.GetName())
	sortAllocs(allocs)
	var occs []*occupant
	for _, a := range allocs {
		o := s.classify(batch, tg, a, replaced, ann, &waiting)
		if o != nil {
			occs = append(occs, o)
		}
	}
	// Pick one occupant per index, live ones first, then keep the lowest
	// count indexes: extras are the highest indexes, stopped.
	sortOccupants(occs)
	count := int(max(tg.GetCount(), 0))
	used := map[int32]bool{}
	kept := 0
	var live []*pb.Allocation
	for _, o := range occs {
		extra := used[o.index] || kept >= count
		if extra {
			switch o.kind {
			case occLive:
				desc := DescScaledDown
				if used[o.index] {
					desc = DescDuplicate
				}
				s.stop(o.alloc, desc, false)
				ann.Stop++
			case occWaiting:
				// Not needed any more: forget the delayed reschedule.
				waiting = dropDelayed(waiting, o.alloc)
			}
			continue
		}
		used[o.index] = true
		kept++
		switch o.kind {
		case occLive:
			live = append(live, o.alloc)
		case occReplace:
			places = append(places, placement{tg: tg, index: o.index, prev: o.alloc, occ: o})
			if o.countPlace {
				ann.Place++
			}
		}
	}
	for i := int32(0); kept < count; i++ {
		if !used[i] {
			used[i] = true
			kept++
			places = append(places, placement{tg: tg, index: i})
			ann.Place++
		}
	}
	updates, err = s.updateLive(tg, live, ann)
	return places, updates, waiting, err
}

// classify sorts one alloc of a group into what it means for its index,
// stopping what must stop.
func (s *sched) classify(batch bool, tg *pb.TaskGroup, a *pb.Allocation, replaced map[string]bool, ann *pb.PlanAnnotation, waiting *[]delayed) *occupant {
	tr := a.GetDesiredTransition()
	idx := a.GetIndex()
	if rules.AllocServerTerminal(a) {
		switch {
		case replaced[a.GetId()]:
			return nil
		case tr.GetNoReplace():
			// Stopped on request without replacement: the index stays
			// empty until the job changes.
			if a.GetJobVersion() == s.job.GetVersion() {
				return &occupant{kind: occDone, index: idx, alloc: a}
			}
			return nil
		case a.GetClientStatus() == pb.AllocClientStatus_ALLOC_CLIENT_STATUS_LOST || tr.GetMigrate():
			// Stopped by an earlier plan whose replacement found no node.
			return &occupant{kind: occReplace, index: idx, alloc: a, countPlace: true}
		}
		return nil
	}
	node := s.nodeByID[a.GetNodeId()]
	switch a.GetClientStatus() {
	case pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE:
		if batch {
			return &occupant{kind: occDone, index: idx, alloc: a}
		}
		if replaced[a.GetId()] {
			return nil
		}
		s.stop(a, DescCompleted, false)
		return &occupant{kind: occReplace, index: idx, alloc: a, countPlace: true}
	case pb.AllocClientStatus_ALLOC_CLIENT_STATUS_LOST:
		if replaced[a.GetId()] {
			return nil
		}
		s.stop(a, DescNodeLost, true)
		ann.Lost++
		return &occupant{kind: occReplace, index: idx, alloc: a}
	case pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED:
		if replaced[a.GetId()] {
			return nil
		}
		d := Reschedule(reschedulePolicy(batch, tg), a, s.opts.Now)
		switch {
		case !d.Eligible:
			return &occupant{kind: occDone, index: idx, alloc: a}
		case tr.GetReschedule() || d.At <= s.opts.Now:
			ann.Reschedule++
			return &occupant{kind: occReplace, index: idx, alloc: a, reschedule: true, delayMS: d.DelayMS, stopOld: true}
		case a.GetFollowupEvalId() != "" && a.GetFollowupEvalId() != s.eval.GetId():
			// Already waiting for its delayed eval.
			return &occupant{kind: occWaiting, index: idx, alloc: a}
		}
		*waiting = append(*waiting, delayed{alloc: a, at: d.At})
		return &occupant{kind: occWaiting, index: idx, alloc: a}
	}
	// Live.
	switch {
	case node == nil || node.GetStatus() == pb.NodeStatus_NODE_STATUS_DOWN:
		s.stop(a, DescNodeLost, true)
		ann.Lost++
		return &occupant{kind: occReplace, index: idx, alloc: a}
	case tr.GetMigrate() && tr.GetNoReplace():
		s.stop(a, DescNoReplace, false)
		ann.Stop++
		return &occupant{kind: occDone, index: idx, alloc: a}
	case tr.GetMigrate():
		s.stop(a, DescMigrating, false)
		ann.Migrate++
		return &occupant{kind: occReplace, index: idx, alloc: a}
	}
	return &occupant{kind: occLive, index: idx, alloc: a}
}

// sortOccupants orders by index, live before replacements before waiting
// before done; stable on the alloc order the caller sorted by.
func sortOccupants(os []*occupant) {
	sort.SliceStable(os, func(i, j int) bool {
		if os[i].index != os[j].index {
			return os[i].index < os[j].index
		}
		return os[i].kind < os[j].kind
	})
}

func dropDelayed(ds []delayed, a *pb.Allocation) []delayed {
	out := ds[:0]
	for _, d := range ds {
		if d.alloc != a {
			out = append(out, d)
		}
	}
	return out
}

// updateLive moves kept allocs of older job versions to the current one:
// in place when GroupUpdate allows and the node still takes the group,
// else destructively, at most max_parallel in this eval.
func (s *sched) updateLive(tg *pb.TaskGroup, live []*pb.Allocation, ann *pb.PlanAnnotation) ([]placement, error) {
	var current, destructive []*pb.Allocation
	for _, a := range live {
		if a.GetJobVersion() == s.job.GetVersion() {
			current = append(current, a)
			ann.Ignore++
			continue
		}
		old, err := s.jobVersion(a.GetJobVersion())
		if err != nil {
			return nil, err
		}
		var oldTG *pb.TaskGroup
		for _, g := range old.GetGroups() {
			if g.GetName() == tg.GetName() {
				oldTG = g
			}
		}
		kind := GroupUpdate(oldTG, tg)
		if kind != UpdateDestructive {
			// A node that stopped taking new allocs (drain, eligibility)
			// still keeps this one; only its constraints and drivers must
			// hold for the new version.
			if ok, _ := s.pl.feasible(s.pl.group(s.job, tg), s.nodeByID[a.GetNodeId()]); ok {
				s.plan.Allocs = append(s.plan.Allocs, s.inPlace(a))
				ann.InPlaceUpdate++
				current = append(current, a)
				continue
			}
		}
		destructive = append(destructive, a)
	}
	budget, minHealthy := destructiveBudget(s.job, tg, current, s.opts.Now)
	var out []placement
	for i, a := range destructive {
		if budget >= 0 && i >= budget {
			ann.Ignore += int32(len(destructive) - i)
			s.rolling = true
			wait := s.opts.Now + max(minHealthy, RollingUpdateRecheckMS)*1e6
			if s.rollingWait == 0 || wait < s.rollingWait {
				s.rollingWait = wait
			}
			break
		}
		ann.DestructiveUpdate++
		out = append(out, placement{tg: tg, index: a.GetIndex(), prev: a, update: true})
	}
	return out, nil
}

// placeOne finds a node for p and adds the alloc to the plan, or records
// the failure.
func (s *sched) placeOne(p placement) error {
	g := s.pl.group(s.job, p.tg)
	if p.update {
		// The old alloc's resources are free for its own replacement.
		s.pl.release(p.prev)
	}
	var avoid map[string]bool
	if p.occ != nil && p.occ.reschedule {
		avoid = map[string]bool{p.prev.GetNodeId(): true}
		for _, e := range p.prev.GetRescheduleEvents() {
			avoid[e.GetPrevNodeId()] = true
		}
	}
	asks := groupAsks(p.tg, p.index)
	node, m, err := s.pl.place(g, asks, avoid, stickyTarget(g, p.prev))
	if err != nil {
		return err
	}
	if node == nil {
		if p.update {
			if err := s.keepOrStop(p.prev, s.prevAsks(g, p.prev, asks)); err != nil {
				return err
			}
		}
		s.fail(p.tg.GetName(), m)
		return nil
	}
	a := s.newAlloc(p.tg, p.index, node, p.prev)
	if p.occ != nil && p.occ.reschedule {
		a.RescheduleEvents = rescheduleEvents(p.prev, s.opts.Now, p.occ.delayMS)
	}
	if p.update {
		s.stop(p.prev, DescUpdated, false)
	}
	if p.occ != nil && p.occ.stopOld {
		s.stop(p.prev, DescRescheduled, false)
	}
	s.pl.claim(a)
	placed := g.placedAsks(asks, node)
	s.pl.vols.reserve(s, a, placed)
	recordHostVolumes(a, placed)
	s.plan.Allocs = append(s.plan.Allocs, a)
	return nil
}

// keepOrStop decides the old alloc of a destructive update whose new
// alloc found no node: it keeps running, unless it holds a claim the new
// alloc could never share with it (a single-writer volume), which frees
// only once it stops. Keeping it would hold the update back forever, so
// it is stopped, and the new alloc is placed once the claim is freed (the
// evaluation blocks; freeing the claim wakes it).
func (s *sched) keepOrStop(prev *pb.Allocation, asks []volumeAsk) error {
	if len(asks) > 0 {
		blocks, err := s.pl.vols.blocksReplacement(prev, asks)
		if err != nil {
			return err
		}
		if blocks {
			s.stop(prev, DescUpdatedAwaitingClaim, false)
			return nil
		}
	}
	s.pl.unrelease(prev)
	return nil
}
