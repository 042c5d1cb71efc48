package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"

	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
)

// The volume scenario's phase breakdown: for every job, when each step of
// its way from the register call to running happened, on the simulator's
// side (the nodes' calls, the fake plugin's and driver's) and on the
// servers' (the times they record on the job's evaluation, alloc and
// claim). Every clock is this machine's.

// phase is one step a volume job passes, in order.
type phase int

const (
	phaseRegistered  phase = iota // the job's register call sent
	phaseEvaluated                // its evaluation planned (the eval's modified_at: the scheduler ran)
	phasePlaced                   // its alloc created, with the claim (the plan proposed; applied)
	phaseNodeSeen                 // the node's alloc watch answered with the alloc
	phaseClaimReady               // the node's ClientClaim answered the claim ready
	phaseStaged                   // NodeStageVolume on the node's plugin
	phasePublished                // NodePublishVolume
	phaseTaskStarted              // the driver started the task
	phaseInUse                    // the node's in-use report answered (claim in use in raft)
	phaseRunningSent              // the node's alloc update with the alloc running answered (applied)
	phaseRunningSeen              // the API caller saw every alloc running (one time for all)
	numPhases
)

var phaseNames = [numPhases]string{
	"register call sent", "evaluation planned", "placed (plan with its claim proposed)", "alloc seen by the node",
	"claim ready at the node", "node stage", "node publish", "task started", "claim in use (reported, applied)",
	"alloc running (reported, applied)", "all running seen by the API caller",
}

// phaseLog records, per key (an alloc ID, or a volume ID for the plugin's
// calls), the first time each phase happened. It records only while on.
type phaseLog struct {
	mu    sync.Mutex
	on    bool
	times [numPhases]map[string]time.Time
}

func newPhaseLog() *phaseLog {
	l := &phaseLog{}
	for i := range l.times {
		l.times[i] = map[string]time.Time{}
	}
	return l
}

// start turns recording on, forgetting what was recorded.
func (l *phaseLog) start() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.on = true
	for i := range l.times {
		l.times[i] = map[string]time.Time{}
	}
}

func (l *phaseLog) mark(p phase, key string, t time.Time) {
	if l == nil || key == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.on {
		return
	}
	if _, ok := l.times[p][key]; !ok {
		l.times[p][key] = t
	}
}

func (l *phaseLog) get(p phase, key string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.times[p][key]
	return t, ok
}

// observe records the phases a node's call to the servers shows: the
// alloc watch's answer, the claim's readiness, the in-use report and the
// running update (their answers, i.e. applied).
func (l *phaseLog) observe(method string, req, reply any, err error, done time.Time) {
	if l == nil || err != nil {
		return
	}
	switch method {
	case pb.ClientAllocs_Watch_FullMethodName:
		for _, a := range reply.(*pb.ClientAllocsResponse).GetAllocs() {
			if a.GetJobId() != "" { // not a stub
				l.mark(phaseNodeSeen, a.GetId(), done)
			}
		}
	case pb.Claims_ClientClaim_FullMethodName:
		if r := reply.(*pb.ClientClaimResponse); r.GetClaim().GetState() == pb.ClaimState_CLAIM_STATE_READY {
			l.mark(phaseClaimReady, req.(*pb.ClientClaimRequest).GetAllocId(), done)
		}
	case pb.Claims_ClientClaimUpdate_FullMethodName:
		if r := req.(*pb.ClientClaimUpdateRequest); r.GetState() == pb.ClaimState_CLAIM_STATE_IN_USE && r.GetError() == nil {
			l.mark(phaseInUse, r.GetAllocId(), done)
		}
	case pb.ClientAllocs_Update_FullMethodName:
		for _, u := range req.(*pb.ClientAllocUpdateRequest).GetUpdates() {
			if u.GetClientStatus() == pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING {
				l.mark(phaseRunningSent, u.GetAllocId(), done)
			}
		}
	}
}

// interceptor observes the nodes' unary calls.
func (l *phaseLog) interceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		l.observe(method, req, reply, err, time.Now())
		return err
	}
}

// phaseStat is one phase over every job: when the last job reached it
// (seconds from the first register call), and the step from the phase
// before, per job (median, 99th percentile, max; seconds).
type phaseStat struct {
	Phase    string  `json:"phase"`
	Jobs     int     `json:"jobs"`
	AllBy    float64 `json:"all_by_seconds"`
	StepP50  float64 `json:"step_p50_seconds"`
	StepP99  float64 `json:"step_p99_seconds"`
	StepMax  float64 `json:"step_max_seconds"`
	FirstAt  float64 `json:"first_at_seconds"`
	MedianAt float64 `json:"median_at_seconds"`
}

// volumeJobTimes is one job's phases (zero: not seen).
type volumeJobTimes [numPhases]time.Time

// collectPhases joins the simulator's records with the servers' times on
// the jobs' evaluations, allocs and claims.
func (s *sim) collectPhases(ctx context.Context, start time.Time, registered map[string]time.Time, end time.Time,
	volumeOf map[string]string) ([]phaseStat, error) {
	allocs, err := listAll(ctx, func(q *api.QueryOptions) ([]*pb.Allocation, *api.QueryMeta, error) {
		return s.api.Allocations().List(ctx, q)
	})
	if err != nil {
		return nil, fmt.Errorf("listing allocs: %w", err)
	}
	evals, err := listAll(ctx, func(q *api.QueryOptions) ([]*pb.Evaluation, *api.QueryMeta, error) {
		return s.api.Evaluations().List(ctx, q)
	})
	if err != nil {
		return nil, fmt.Errorf("listing evaluations: %w", err)
	}
	evalDone := map[string]time.Time{} // job → its latest evaluation's completion
	for _, e := range evals {
		if _, ok := registered[e.GetJobId()]; ok && e.GetStatus() == pb.EvalStatus_EVAL_STATUS_COMPLETE {
			if t := time.Unix(0, e.GetModifiedAt()); t.After(evalDone[e.GetJobId()]) {
				evalDone[e.GetJobId()] = t
			}
		}
	}
	var jobs []volumeJobTimes
	for _, a := range allocs {
		reg, ok := registered[a.GetJobId()]
		if !ok {
			continue
		}
		var t volumeJobTimes
		t[phaseRegistered] = reg
		t[phaseEvaluated] = evalDone[a.GetJobId()]
		t[phasePlaced] = time.Unix(0, a.GetCreatedAt())
		for _, p := range []phase{phaseNodeSeen, phaseClaimReady, phaseInUse, phaseTaskStarted, phaseRunningSent} {
			t[p], _ = s.phases.get(p, a.GetId())
		}
		vol := volumeOf[a.GetJobId()]
		t[phaseStaged], _ = s.phases.get(phaseStaged, vol)
		t[phasePublished], _ = s.phases.get(phasePublished, vol)
		t[phaseRunningSeen] = end
		jobs = append(jobs, t)
	}
	return phaseStats(start, jobs), nil
}

// phaseStats summarises the jobs' phases.
func phaseStats(start time.Time, jobs []volumeJobTimes) []phaseStat {
	var out []phaseStat
	for p := range numPhases {
		st := phaseStat{Phase: phaseNames[p]}
		var at, steps []float64
		for _, j := range jobs {
			if j[p].IsZero() {
				continue
			}
			st.Jobs++
			at = append(at, j[p].Sub(start).Seconds())
			// The step is from the latest phase before it this job has.
			for q := p - 1; q >= 0; q-- {
				if !j[q].IsZero() {
					steps = append(steps, j[p].Sub(j[q]).Seconds())
					break
				}
			}
		}
		slices.Sort(at)
		slices.Sort(steps)
		if len(at) > 0 {
			st.FirstAt, st.MedianAt, st.AllBy = at[0], quantile(at, 0.5), at[len(at)-1]
		}
		if len(steps) > 0 {
			st.StepP50, st.StepP99, st.StepMax = quantile(steps, 0.5), quantile(steps, 0.99), steps[len(steps)-1]
		}
		out = append(out, st)
	}
	return out
}

// quantile of sorted xs (nearest rank).
func quantile(xs []float64, q float64) float64 {
	i := int(q*float64(len(xs))+0.5) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

// printPhases prints the breakdown as a table.
func printPhases(w io.Writer, ps []phaseStat) {
	fmt.Fprintf(w, "\n| phase (per job, in order) | jobs | first | median job | last job | step p50 | step p99 | step max |\n|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, p := range ps {
		fmt.Fprintf(w, "| %s | %d | %.2f s | %.2f s | %.2f s | %s | %s | %s |\n", p.Phase, p.Jobs, p.FirstAt, p.MedianAt, p.AllBy,
			fmtSeconds(p.StepP50), fmtSeconds(p.StepP99), fmtSeconds(p.StepMax))
	}
}

func fmtSeconds(s float64) string {
	if s < 1 {
		return fmt.Sprintf("%.0f ms", s*1000)
	}
	return fmt.Sprintf("%.2f s", s)
}

// listAll reads every page of a list.
func listAll[T any](ctx context.Context, list func(*api.QueryOptions) ([]T, *api.QueryMeta, error)) ([]T, error) {
	var out []T
	q := &api.QueryOptions{PerPage: 1000}
	for {
		page, meta, err := list(q)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if meta.NextToken == "" || ctx.Err() != nil {
			return out, ctx.Err()
		}
		q = &api.QueryOptions{PerPage: 1000, NextToken: meta.NextToken}
	}
}
