package scheduler

import (
	"hash/fnv"
	"math"
	"math/bits"
	"sort"

	"berth.dev/berth/internal/rules"
	"berth.dev/berth/rpc/pb"
)

// DefaultCandidates is how many fitting nodes a placement scores when
// Options.MaxCandidates is 0: log2 of the schedulable nodes as Nomad
// samples, but never fewer than 16, so small clusters are searched in full
// (a score costs little next to a bad placement).
func DefaultCandidates(nodes int) int {
	n := bits.Len(uint(nodes))
	if n < 16 {
		return 16
	}
	return n
}

// nodeUsage is a node's reserved resources as this plan leaves them.
type nodeUsage struct {
	cpu, mem       int64
	capCPU, capMem int64
}

// groupCtx is what the placer knows of one group while placing it.
type groupCtx struct {
	name        string
	count       int32
	constraints []*pb.Constraint
	drivers     []string
	// distinctJob: no two allocs of the job on a node; distinctGroup: no
	// two of this group.
	distinctJob, distinctGroup bool
	cpu, mem                   int64
	antiAffinity               bool
	// feas caches the node checks that do not change within a run, by
	// index in placer.ready: 0 unknown, 1 feasible, 2 filtered (reason).
	feas    []int8
	reasons []string
	cursor  int
	// failed is the metric of the first placement that found no node;
	// later placements of the group are counted as coalesced failures.
	// A group with per_alloc volumes keeps trying: its allocs need
	// different volumes.
	failed   *pb.AllocMetric
	perAlloc bool
	// hostVols are the group's host volume requests (host_volumes.go).
	hostVols []hostAsk
}

// placer finds nodes for allocs and keeps the cluster's usage as the plan
// changes it.
type placer struct {
	s       *sched
	ready   []*pb.Node // schedulable nodes in this eval's order
	limit   int
	m       *matcher
	usage   map[string]*nodeUsage
	stopped map[string]bool
	// perNode counts this job's live allocs per node and group; "" keys
	// the job's total.
	perNode map[string]map[string]int
	groups  map[string]*groupCtx
	vols    *volumeBook
}

func newPlacer(s *sched, nodes []*pb.Node) *placer {
	p := &placer{
		s:       s,
		m:       newMatcher(),
		usage:   map[string]*nodeUsage{},
		stopped: map[string]bool{},
		perNode: map[string]map[string]int{},
		groups:  map[string]*groupCtx{},
		vols:    newVolumeBook(s.st),
	}
	type keyed struct {
		h uint64
		n *pb.Node
	}
	var ks []keyed
	for _, n := range nodes {
		if !rules.NodeSchedulable(n) {
			continue
		}
		// The order is a pure function of the eval and node IDs: different
		// evals start their search in different places (what Nomad's
		// shuffle is for), and the same eval always plans the same.
		h := fnv.New64a()
		h.Write([]byte(s.eval.GetId()))
		h.Write([]byte{0})
		h.Write([]byte(n.GetId()))
		ks = append(ks, keyed{h.Sum64(), n})
	}
	sort.Slice(ks, func(i, j int) bool {
		if ks[i].h != ks[j].h {
			return ks[i].h < ks[j].h
		}
		return ks[i].n.GetId() < ks[j].n.GetId()
	})
	for _, k := range ks {
		p.ready = append(p.ready, k.n)
	}
	p.limit = s.opts.MaxCandidates
	if p.limit <= 0 {
		p.limit = DefaultCandidates(len(p.ready))
	}
	return p
}

// track counts the job's live allocs per node, for anti-affinity and
// distinct_hosts. Called once with the job's allocs.
func (p *placer) track(allocs []*pb.Allocation) {
	for _, a := range allocs {
		if !rules.AllocTerminal(a) {
			p.count(a.GetNodeId(), a.GetTaskGroup(), 1)
		}
	}
}

func (p *placer) count(node, group string, d int) {
	m := p.perNode[node]
	if m == nil {
		m = map[string]int{}
		p.perNode[node] = m
	}
	m[group] += d
	m[""] += d
}

// release frees a live alloc's resources when the plan stops it.
func (p *placer) release(a *pb.Allocation) {
	if p.stopped[a.GetId()] || rules.AllocTerminal(a) {
		return
	}
	p.stopped[a.GetId()] = true
	if u := p.usage[a.GetNodeId()]; u != nil {
		u.cpu -= a.GetResources().GetCpuMhz()
		u.mem -= a.GetResources().GetMemoryMb()
	}
	p.count(a.GetNodeId(), a.GetTaskGroup(), -1)
}

// unrelease undoes release, for a destructive update whose replacement
// found no node.
func (p *placer) unrelease(a *pb.Allocation) {
	if !p.stopped[a.GetId()] {
		return
	}
	delete(p.stopped, a.GetId())
	if u := p.usage[a.GetNodeId()]; u != nil {
		u.cpu += a.GetResources().GetCpuMhz()
		u.mem += a.GetResources().GetMemoryMb()
	}
	p.count(a.GetNodeId(), a.GetTaskGroup(), 1)
}

// claim records a placement.
func (p *placer) claim(a *pb.Allocation) {
	u := p.usage[a.GetNodeId()]
	u.cpu += a.GetResources().GetCpuMhz()
	u.mem += a.GetResources().GetMemoryMb()
	p.count(a.GetNodeId(), a.GetTaskGroup(), 1)
}

// nodeUsage loads a node's usage on first use: its live allocs less those
// this plan stops, summed by rules.AllocsFit so the plan re-check and the
// scheduler count alike.
func (p *placer) nodeUsage(n *pb.Node) (*nodeUsage, error) {
	if u := p.usage[n.GetId()]; u != nil {
		return u, nil
	}
	allocs, err := p.s.st.AllocsByNode(n.GetId())
	if err != nil {
		return nil, &StateError{What: "allocs of node " + n.GetId(), Err: err}
	}
	live := allocs[:0:0]
	for _, a := range allocs {
		if !p.stopped[a.GetId()] {
			live = append(live, a)
		}
	}
	_, _, cpu, mem := rules.AllocsFit(n, live)
	capCPU, capMem := rules.NodeCapacity(n)
	u := &nodeUsage{cpu: cpu, mem: mem, capCPU: capCPU, capMem: capMem}
	p.usage[n.GetId()] = u
	return u, nil
}

// group returns the placement context of tg, built on first use.
func (p *placer) group(job *pb.Job, tg *pb.TaskGroup) *groupCtx {
	if g := p.groups[tg.GetName()]; g != nil {
		return g
	}
	g := &groupCtx{
		name:         tg.GetName(),
		count:        tg.GetCount(),
		feas:         make([]int8, len(p.ready)),
		reasons:      make([]string, len(p.ready)),
		antiAffinity: job.GetType() != pb.JobType_JOB_TYPE_SYSTEM,
		perAlloc:     groupPerAlloc(tg),
		hostVols:     groupHostAsks(tg),
	}
	add := func(cs []*pb.Constraint, jobLevel bool) {
		for _, c := range cs {
			if c.GetOperator() == OpDistinctHosts {
				if c.GetValue() == "" || c.GetValue() == "true" {
					if jobLevel {
						g.distinctJob = true
					} else {
						g.distinctGroup = true
					}
				}
				continue
			}
			g.constraints = append(g.constraints, c)
		}
	}
	add(job.GetConstraints(), true)
	add(tg.GetConstraints(), false)
	seen := map[string]bool{}
	for _, t := range tg.GetTasks() {
		add(t.GetConstraints(), false)
		if d := t.GetDriver(); d != "" && !seen[d] {
			seen[d] = true
			g.drivers = append(g.drivers, d)
		}
	}
	sort.Strings(g.drivers)
	r := groupResources(tg)
	g.cpu, g.mem = r.GetCpuMhz(), r.GetMemoryMb()
	p.groups[tg.GetName()] = g
	return g
}

// feasible checks what does not change within a run: the group's drivers,
// constraints and static host volumes. reason names the first failure as AllocMetric counts it.
func (p *placer) feasible(g *groupCtx, n *pb.Node) (ok bool, reason string) {
	for _, d := range g.drivers {
		info := n.GetDrivers()[d]
		switch {
		case info == nil || !info.GetDetected():
			return false, "missing driver " + d
		case !info.GetHealthy():
			return false, "unhealthy driver " + d
		}
	}
	for _, c := range g.constraints {
		if !p.m.check(c, n) {
			return false, ConstraintString(c)
		}
	}
	if why := hostVolumesMissing(g.hostVols, n); why != "" {
		return false, why
	}
	return true, ""
}

func (p *placer) feasibleAt(g *groupCtx, i int) (bool, string) {
	switch g.feas[i] {
	case 1:
		return true, ""
	case 2:
		return false, g.reasons[i]
	}
	ok, why := p.feasible(g, p.ready[i])
	if ok {
		g.feas[i] = 1
	} else {
		g.feas[i], g.reasons[i] = 2, why
	}
	return ok, why
}

// distinctBlocked reports whether distinct_hosts keeps g off node.
func (p *placer) distinctBlocked(g *groupCtx, node string) bool {
	c := p.perNode[node]
	return (g.distinctJob && c[""] > 0) || (g.distinctGroup && c[g.name] > 0)
}

// fits reports whether g's ask fits u, or the dimension that ran out.
func (g *groupCtx) fits(u *nodeUsage) (bool, string) {
	switch {
	case u.cpu+g.cpu > u.capCPU:
		return false, rules.DimensionCPU
	case u.mem+g.mem > u.capMem:
		return false, rules.DimensionMemory
	}
	return true, ""
}

// binPackScore is Nomad's BestFit-v3 on cpu and memory after placement,
// scaled to [0,1]: 1 for a node left full, 0 for one left empty.
func binPackScore(u *nodeUsage, cpu, mem int64) float64 {
	free := func(used, capacity int64) float64 {
		if capacity <= 0 {
			return 0
		}
		f := 1 - float64(used)/float64(capacity)
		return math.Max(0, math.Min(1, f))
	}
	total := math.Pow(10, free(u.cpu+cpu, u.capCPU)) + math.Pow(10, free(u.mem+mem, u.capMem))
	return (20 - total) / 18
}

// score ranks node for g: bin packing, less a penalty per alloc of the
// group already there, less a penalty for nodes in avoid (where the alloc
// being rescheduled failed). Components are averaged as Nomad's rank
// iterators do. The anti-affinity penalty is the node's allocs of the
// group over the group's even share of the schedulable nodes (Nomad
// divides by the group's count instead, which lets a large group stack on
// a few nodes): a group spreads evenly first, and packs within its share.
func (p *placer) score(g *groupCtx, n *pb.Node, u *nodeUsage, avoid map[string]bool) float64 {
	sum, parts := binPackScore(u, g.cpu, g.mem), 1.0
	if g.antiAffinity && g.count > 0 {
		if c := p.perNode[n.GetId()][g.name]; c > 0 {
			// Not clamped: a node further over its share must always
			// rank lower, or a full sample would stack on the fullest.
			sum -= float64(c) / float64(p.share(g))
			parts++
		}
	}
	if avoid[n.GetId()] {
		sum--
		parts++
	}
	return sum / parts
}

// share is how many allocs of g each schedulable node takes when g is
// spread evenly, at least 1.
func (p *placer) share(g *groupCtx) int {
	if len(p.ready) == 0 {
		return 1
	}
	return max(1, (int(g.count)+len(p.ready)-1)/len(p.ready))
}

// place picks a node for one alloc of g that needs the volume claims
// asks. It returns nil and the metric when no node fits; after a group's
// first failure it returns nil, nil at once (the caller coalesces), since
// nothing placed later in the run makes room — unless the group has
// per_alloc volumes, whose next alloc needs another volume.
func (p *placer) place(g *groupCtx, asks []volumeAsk, avoid map[string]bool, stick stickTo) (*pb.Node, *pb.AllocMetric, error) {
	if g.failed != nil && !g.perAlloc && stick.node == "" {
		return nil, nil, nil
	}
	n := len(p.ready)
	m := &pb.AllocMetric{NodesAvailable: int32(n)}
	var best *pb.Node
	var bestScore float64
	found, last := 0, g.cursor-1
	for k := 0; k < n && found < p.limit; k++ {
		i := (g.cursor + k) % n
		last = i
		node := p.ready[i]
		m.NodesEvaluated++
		if ok, why := p.feasibleAt(g, i); !ok {
			m.NodesFiltered++
			addCount(&m.ConstraintFiltered, why)
			continue
		}
		if p.distinctBlocked(g, node.GetId()) {
			m.NodesFiltered++
			addCount(&m.ConstraintFiltered, OpDistinctHosts)
			continue
		}
		if why := stick.refuses(g, node); why != "" {
			m.NodesFiltered++
			addCount(&m.ConstraintFiltered, why)
			continue
		}
		// Volumes depend on this plan's claims, so they are checked on
		// every visit rather than cached with the static checks.
		if len(asks) > 0 {
			why, err := p.vols.check(node, asks)
			if err != nil {
				return nil, nil, err
			}
			if why != "" {
				m.NodesFiltered++
				addCount(&m.ConstraintFiltered, why)
				continue
			}
		}
		if dyn := dynamicAsks(g.hostVols, node); len(dyn) > 0 {
			why, err := p.vols.checkHost(node, dyn)
			if err != nil {
				return nil, nil, err
			}
			if why != "" {
				m.NodesFiltered++
				addCount(&m.ConstraintFiltered, why)
				continue
			}
		}
		u, err := p.nodeUsage(node)
		if err != nil {
			return nil, nil, err
		}
		if ok, dim := g.fits(u); !ok {
			m.NodesExhausted++
			addCount(&m.DimensionExhausted, dim)
			continue
		}
		found++
		sc := p.score(g, node, u, avoid)
		if best == nil || sc > bestScore || (sc == bestScore && node.GetId() < best.GetId()) {
			best, bestScore = node, sc
		}
	}
	if n > 0 {
		g.cursor = (last + 1) % n
	}
	if best == nil {
		if g.failed == nil {
			g.failed = m
		}
		return nil, m, nil
	}
	return best, nil, nil
}

// fitsOn checks one node for g, for system jobs: feasibility, the volume
// claims asks, and resources.
func (p *placer) fitsOn(g *groupCtx, n *pb.Node, asks []volumeAsk) (ok bool, reason string, exhausted bool, err error) {
	if !rules.NodeSchedulable(n) {
		return false, "node not schedulable", false, nil
	}
	if ok, why := p.feasible(g, n); !ok {
		return false, why, false, nil
	}
	if p.distinctBlocked(g, n.GetId()) {
		return false, OpDistinctHosts, false, nil
	}
	if len(asks) > 0 {
		why, err := p.vols.check(n, asks)
		if err != nil || why != "" {
			return false, why, false, err
		}
	}
	if dyn := dynamicAsks(g.hostVols, n); len(dyn) > 0 {
		why, err := p.vols.checkHost(n, dyn)
		if err != nil || why != "" {
			return false, why, false, err
		}
	}
	u, err := p.nodeUsage(n)
	if err != nil {
		return false, "", false, err
	}
	if ok, dim := g.fits(u); !ok {
		return false, dim, true, nil
	}
	return true, "", false, nil
}

func addCount(m *map[string]int32, key string) {
	if *m == nil {
		*m = map[string]int32{}
	}
	(*m)[key]++
}
