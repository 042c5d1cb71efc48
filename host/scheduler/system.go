package scheduler

import (
	"berth.dev/berth/internal/rules"
	"berth.dev/berth/rpc/pb"
)

// system reconciles a system job: one alloc of each group on every node
// that is schedulable, satisfies the group's constraints and drivers and
// has room. Allocs on down nodes are lost, on ineligible or draining nodes
// (unless the drain ignores system jobs) or nodes that no longer satisfy
// the group they are stopped; none is replaced elsewhere.
func (s *sched) system() error {
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
	groups := map[string]bool{}
	for _, g := range s.job.GetGroups() {
		groups[g.GetName()] = true
	}
	byGroupNode := map[string]map[string][]*pb.Allocation{}
	for _, a := range allocs {
		if !groups[a.GetTaskGroup()] {
			if !rules.AllocServerTerminal(a) {
				s.stop(a, DescGroupRemoved, false)
				s.annotation(a.GetTaskGroup()).Stop++
			}
			continue
		}
		m := byGroupNode[a.GetTaskGroup()]
		if m == nil {
			m = map[string][]*pb.Allocation{}
			byGroupNode[a.GetTaskGroup()] = m
		}
		m[a.GetNodeId()] = append(m[a.GetNodeId()], a)
	}
	// Allocs on nodes that are gone from the state are lost.
	for _, g := range s.job.GetGroups() {
		for _, node := range sortedKeys(byGroupNode[g.GetName()]) {
			if s.nodeByID[node] != nil {
				continue
			}
			for _, a := range byGroupNode[g.GetName()][node] {
				if !rules.AllocTerminal(a) {
					s.stop(a, DescNodeLost, true)
					s.annotation(g.GetName()).Lost++
				}
			}
		}
	}
	for _, tg := range s.job.GetGroups() {
		if err := s.systemGroup(tg, byGroupNode[tg.GetName()]); err != nil {
			return err
		}
	}
	return nil
}

type systemUpdate struct {
	node  *pb.Node
	alloc *pb.Allocation
}

func (s *sched) systemGroup(tg *pb.TaskGroup, byNode map[string][]*pb.Allocation) error {
	ann := s.annotation(tg.GetName())
	g := s.pl.group(s.job, tg)
	var current []*pb.Allocation
	var destructive []systemUpdate
	var places []*pb.Node
	for _, n := range s.nodes {
		as := byNode[n.GetId()]
		sortAllocs(as)
		var live []*pb.Allocation
		holds := false
		for _, a := range as {
			tr := a.GetDesiredTransition()
			switch {
			case rules.AllocServerTerminal(a):
				// Stopped with no_replace: the node stays without one
				// until the job changes.
				holds = holds || (tr.GetNoReplace() && a.GetJobVersion() == s.job.GetVersion())
			case rules.AllocClientTerminal(a):
				// A failed or completed system alloc is not replaced on its
				// node until the job changes (its restart policy already
				// ran); a lost one is.
				if a.GetClientStatus() != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_LOST && a.GetJobVersion() == s.job.GetVersion() {
					holds = true
				}
			case tr.GetMigrate():
				desc := DescMigrating
				if tr.GetNoReplace() {
					desc, holds = DescNoReplace, true
				}
				if n.GetStatus() == pb.NodeStatus_NODE_STATUS_DOWN {
					s.stop(a, DescNodeLost, true)
					ann.Lost++
					continue
				}
				s.stop(a, desc, false)
				ann.Stop++
			default:
				live = append(live, a)
			}
		}
		if reason := systemStopReason(n); reason == DescMigrating {
			ann.Ignore += int32(len(live))
			continue
		} else if reason != "" {
			for _, a := range live {
				s.stop(a, reason, reason == DescNodeLost)
				if reason == DescNodeLost {
					ann.Lost++
				} else {
					ann.Stop++
				}
			}
			continue
		}
		if ok, _ := s.pl.feasible(g, n); !ok {
			for _, a := range live {
				s.stop(a, DescInfeasible, false)
				ann.Stop++
			}
			continue
		}
		for _, a := range live[min(1, len(live)):] {
			s.stop(a, DescDuplicate, false)
			ann.Stop++
		}
		switch {
		case len(live) > 0:
			a := live[0]
			if a.GetJobVersion() == s.job.GetVersion() {
				current = append(current, a)
				ann.Ignore++
				continue
			}
			old, err := s.jobVersion(a.GetJobVersion())
			if err != nil {
				return err
			}
			var oldTG *pb.TaskGroup
			for _, og := range old.GetGroups() {
				if og.GetName() == tg.GetName() {
					oldTG = og
				}
			}
			if GroupUpdate(oldTG, tg) != UpdateDestructive {
				s.plan.Allocs = append(s.plan.Allocs, s.inPlace(a))
				ann.InPlaceUpdate++
				current = append(current, a)
				continue
			}
			destructive = append(destructive, systemUpdate{node: n, alloc: a})
		case holds:
			ann.Ignore++
		case rules.NodeSchedulable(n):
			places = append(places, n)
		}
	}
	for _, n := range places {
		if err := s.systemPlace(g, tg, n, nil); err != nil {
			return err
		}
	}
	budget, minHealthy := destructiveBudget(s.job, tg, current, s.opts.Now)
	for i, u := range destructive {
		if budget >= 0 && i >= budget {
			ann.Ignore += int32(len(destructive) - i)
			s.rolling = true
			wait := s.opts.Now + max(minHealthy, RollingUpdateRecheckMS)*1e6
			if s.rollingWait == 0 || wait < s.rollingWait {
				s.rollingWait = wait
			}
			break
		}
		if err := s.systemPlace(g, tg, u.node, u.alloc); err != nil {
			return err
		}
	}
	return nil
}

// systemStopReason says why a node keeps no system alloc, or "".
func systemStopReason(n *pb.Node) string {
	switch {
	case n.GetStatus() == pb.NodeStatus_NODE_STATUS_DOWN:
		return DescNodeLost
	case n.GetDrain() != nil && !n.GetDrain().GetIgnoreSystemJobs():
		return DescMigrating
	case n.GetEligibility() == pb.NodeEligibility_NODE_ELIGIBILITY_INELIGIBLE:
		return DescNodeIneligible
	}
	return ""
}

// systemPlace places tg on n, replacing prev (a destructive update) when
// set. A node without room is a failed placement: the metric counts it
// by exhausted dimension across the group's nodes.
func (s *sched) systemPlace(g *groupCtx, tg *pb.TaskGroup, n *pb.Node, prev *pb.Allocation) error {
	if prev != nil {
		s.pl.release(prev)
	}
	asks := groupAsks(tg, 0)
	ok, why, exhausted, err := s.pl.fitsOn(g, n, asks)
	if err != nil {
		return err
	}
	if !ok {
		if prev != nil {
			if err := s.keepOrStop(prev, g.placedAsks(asks, n)); err != nil {
				return err
			}
		}
		m := s.failed[tg.GetName()]
		if m == nil {
			m = &pb.AllocMetric{NodesAvailable: int32(len(s.pl.ready))}
			s.failed[tg.GetName()] = m
		} else {
			m.CoalescedFailures++
		}
		s.queued[tg.GetName()]++
		m.NodesEvaluated++
		if exhausted {
			m.NodesExhausted++
			addCount(&m.DimensionExhausted, why)
		} else {
			m.NodesFiltered++
			addCount(&m.ConstraintFiltered, why)
		}
		return nil
	}
	a := s.newAlloc(tg, 0, n, prev)
	if prev != nil {
		s.stop(prev, DescUpdated, false)
		s.annotation(tg.GetName()).DestructiveUpdate++
	} else {
		s.annotation(tg.GetName()).Place++
	}
	s.pl.claim(a)
	placed := g.placedAsks(asks, n)
	s.pl.vols.reserve(s, a, placed)
	recordHostVolumes(a, placed)
	s.plan.Allocs = append(s.plan.Allocs, a)
	return nil
}
