package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
)

// monitor follows an evaluation to its end and, for commands that start
// allocs, the allocs it placed until they run, printing what happens as
// Nomad's monitor does. Every wait is a blocking query on the index of the
// previous answer: nothing polls.
type monitor struct {
	ctx    context.Context
	client *api.Client
	w      io.Writer
}

// evalDone reports whether an evaluation will not change status any more
// (a blocked evaluation waits for capacity: for the monitor it is done).
func evalDone(e *pb.Evaluation) bool {
	return e.GetStatus() != pb.EvalStatus_EVAL_STATUS_PENDING && e.GetStatus() != pb.EvalStatus_EVAL_STATUS_UNSPECIFIED
}

// followEval waits for the evaluation (and the next evaluations it hands
// over to) to finish and prints its progress. afterIndex is the write that
// made the evaluation: the first read waits until the agent has applied
// it, so a stale read on a follower does not answer "not found".
func (m *monitor) followEval(evalID string, afterIndex uint64) (*pb.Evaluation, error) {
	fmt.Fprintf(m.w, "==> Monitoring evaluation %q\n", shortID(evalID))
	var waitIndex uint64
	if afterIndex > 0 {
		waitIndex = afterIndex - 1
	}
	var last *pb.Evaluation
	for {
		e, meta, err := m.client.Evaluations().Info(m.ctx, evalID, &api.QueryOptions{WaitIndex: waitIndex})
		if err != nil {
			return nil, fmt.Errorf("following evaluation %s: %w", evalID, err)
		}
		waitIndex = max(waitIndex, meta.LastIndex)
		if last == nil {
			fmt.Fprintf(m.w, "    Evaluation triggered by %s\n", evalTrigger(e))
		} else if last.GetStatus() != e.GetStatus() {
			fmt.Fprintf(m.w, "    Evaluation status changed: %q -> %q\n", pb.EnumWord(last.GetStatus()), pb.EnumWord(e.GetStatus()))
		}
		last = e
		if !evalDone(e) {
			continue
		}
		if next := e.GetNextEval(); next != "" && e.GetStatus() != pb.EvalStatus_EVAL_STATUS_BLOCKED {
			fmt.Fprintf(m.w, "==> Evaluation %q finished with status %q; monitoring the next evaluation %q\n",
				shortID(evalID), pb.EnumWord(e.GetStatus()), shortID(next))
			evalID, last = next, nil
			continue
		}
		return e, nil
	}
}

func evalTrigger(e *pb.Evaluation) string {
	switch {
	case e.GetNodeId() != "":
		return fmt.Sprintf("%s of node %q", pb.EnumWord(e.GetTriggeredBy()), shortID(e.GetNodeId()))
	case e.GetJobId() != "":
		return fmt.Sprintf("%s of job %q", pb.EnumWord(e.GetTriggeredBy()), e.GetJobId())
	}
	return pb.EnumWord(e.GetTriggeredBy())
}

// reportEval prints the end of an evaluation: the allocs it placed and,
// when it could not place them all, why. It returns the placed allocs and
// whether the evaluation succeeded, and the index they were read at.
func (m *monitor) reportEval(e *pb.Evaluation) (placed []*pb.Allocation, index uint64, ok bool, err error) {
	if e.GetJobId() != "" {
		allocs, meta, err := api.AllPages(m.ctx, &api.QueryOptions{PerPage: listPerPage}, func(ctx context.Context, q *api.QueryOptions) ([]*pb.Allocation, *api.QueryMeta, error) {
			return m.client.Jobs().Allocations(ctx, e.GetJobId(), q)
		})
		if err != nil {
			return nil, 0, false, fmt.Errorf("reading the allocations of job %s: %w", e.GetJobId(), err)
		}
		index = meta.LastIndex
		for _, a := range allocs {
			if a.GetEvalId() == e.GetId() && a.GetDesiredStatus() == pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_RUN {
				placed = append(placed, a)
			}
		}
		slices.SortFunc(placed, func(a, b *pb.Allocation) int { return strings.Compare(a.GetName()+a.GetId(), b.GetName()+b.GetId()) })
		for _, a := range placed {
			fmt.Fprintf(m.w, "    Allocation %q created: node %q, group %q\n", shortID(a.GetId()), shortID(a.GetNodeId()), a.GetTaskGroup())
		}
	}
	status := pb.EnumWord(e.GetStatus())
	switch {
	case e.GetStatus() == pb.EvalStatus_EVAL_STATUS_FAILED || e.GetStatus() == pb.EvalStatus_EVAL_STATUS_CANCELED:
		fmt.Fprintf(m.w, "==> Evaluation %q finished with status %q: %s\n", shortID(e.GetId()), status, orNone(e.GetStatusDescription()))
		return placed, index, false, nil
	case len(e.GetFailedTgAllocs()) > 0:
		fmt.Fprintf(m.w, "==> Evaluation %q finished with status %q but failed to place all allocations:\n", shortID(e.GetId()), status)
		printPlacementFailures(m.w, "    ", e.GetFailedTgAllocs())
		if b := e.GetBlockedEval(); b != "" {
			fmt.Fprintf(m.w, "    Evaluation %q waiting for additional capacity to place remainder\n", shortID(b))
		} else if e.GetStatus() == pb.EvalStatus_EVAL_STATUS_BLOCKED {
			fmt.Fprintln(m.w, "    The evaluation waits for additional capacity to place remainder")
		}
		return placed, index, false, nil
	}
	fmt.Fprintf(m.w, "==> Evaluation %q finished with status %q\n", shortID(e.GetId()), status)
	return placed, index, true, nil
}

// printPlacementFailures prints, per group, why allocs could not be
// placed: the constraints that filtered nodes and the exhausted resources.
func printPlacementFailures(w io.Writer, indent string, failed map[string]*pb.AllocMetric) {
	for _, group := range sortedKeys(failed) {
		m := failed[group]
		n := m.GetCoalescedFailures() + 1
		fmt.Fprintf(w, "%sTask Group %q (failed to place %d %s):\n", indent, group, n, plural(int(n), "allocation"))
		if m.GetNodesEvaluated() == 0 {
			fmt.Fprintf(w, "%s  * No nodes were eligible for evaluation\n", indent)
		}
		cf := m.GetConstraintFiltered()
		for _, c := range sortedKeys(cf) {
			fmt.Fprintf(w, "%s  * Constraint %q: %d %s excluded by filter\n", indent, c, cf[c], plural(int(cf[c]), "node"))
		}
		if m.GetNodesExhausted() > 0 {
			fmt.Fprintf(w, "%s  * Resources exhausted on %d %s\n", indent, m.GetNodesExhausted(), plural(int(m.GetNodesExhausted()), "node"))
		}
		de := m.GetDimensionExhausted()
		for _, d := range sortedKeys(de) {
			fmt.Fprintf(w, "%s  * Dimension %q exhausted on %d %s\n", indent, d, de[d], plural(int(de[d]), "node"))
		}
	}
}

// followAllocs waits until every alloc runs (or, for batch work, has
// completed), printing status changes and failing task events. It returns
// false, after printing why, when one failed or was lost.
// index is the one placed was read at.
func (m *monitor) followAllocs(jobID string, placed []*pb.Allocation, index uint64) (bool, error) {
	if len(placed) == 0 {
		return true, nil
	}
	fmt.Fprintf(m.w, "==> Monitoring %d %s until %s running\n", len(placed), plural(len(placed), "allocation"), pick(len(placed) == 1, "it is", "they are"))
	last := make(map[string]*pb.Allocation, len(placed))
	waitIndex := index
	for _, a := range placed {
		last[a.GetId()] = a
	}
	for {
		if done, ok := m.allocsSettled(placed, last); done {
			return ok, nil
		}
		allocs, meta, err := api.AllPages(m.ctx, &api.QueryOptions{PerPage: listPerPage, WaitIndex: waitIndex}, func(ctx context.Context, q *api.QueryOptions) ([]*pb.Allocation, *api.QueryMeta, error) {
			return m.client.Jobs().Allocations(ctx, jobID, q)
		})
		if err != nil {
			return false, fmt.Errorf("following the allocations of job %s: %w", jobID, err)
		}
		waitIndex = max(waitIndex, meta.LastIndex)
		for _, a := range allocs {
			prev, ok := last[a.GetId()]
			if !ok {
				continue
			}
			if prev.GetClientStatus() != a.GetClientStatus() {
				fmt.Fprintf(m.w, "    Allocation %q status changed: %q -> %q\n", shortID(a.GetId()), pb.EnumWord(prev.GetClientStatus()), pb.EnumWord(a.GetClientStatus()))
			}
			m.printNewFailures(prev, a)
			last[a.GetId()] = a
		}
	}
}

// allocsSettled decides whether following can stop: every alloc running or
// complete (ok), or one failed or lost (not ok, with its reason printed).
func (m *monitor) allocsSettled(placed []*pb.Allocation, last map[string]*pb.Allocation) (done, ok bool) {
	settled := 0
	for _, p := range placed {
		a := last[p.GetId()]
		switch a.GetClientStatus() {
		case pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED, pb.AllocClientStatus_ALLOC_CLIENT_STATUS_LOST:
			fmt.Fprintf(m.w, "==> Allocation %q %s: %s\n", shortID(a.GetId()), pb.EnumWord(a.GetClientStatus()), allocReason(a))
			return true, false
		case pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING, pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE:
			settled++
		default:
			if a.GetDesiredStatus() != pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_RUN {
				// Stopped before it ran (replaced by a newer version): nothing
				// left to wait for.
				settled++
			}
		}
	}
	if settled < len(placed) {
		return false, false
	}
	fmt.Fprintf(m.w, "==> %s\n", pick(len(placed) == 1, "The allocation is running", fmt.Sprintf("All %d allocations are running", len(placed))))
	return true, true
}

// printNewFailures prints the failing task events an alloc gained since
// prev: a task that fails to start and restarts shows why while the alloc
// is still pending.
func (m *monitor) printNewFailures(prev, a *pb.Allocation) {
	for _, task := range sortedKeys(a.GetTaskStates()) {
		events := a.GetTaskStates()[task].GetEvents()
		seen := len(prev.GetTaskStates()[task].GetEvents())
		for _, ev := range events[min(seen, len(events)):] {
			if ev.GetFailed() {
				fmt.Fprintf(m.w, "    Task %q of allocation %q: %s: %s\n", task, shortID(a.GetId()), ev.GetType(), eventText(ev))
			}
		}
	}
}

// allocReason says why an alloc failed: its client description and the
// last failing event of each failed task.
func allocReason(a *pb.Allocation) string {
	parts := []string{orNone(a.GetClientDescription())}
	for _, task := range sortedKeys(a.GetTaskStates()) {
		ts := a.GetTaskStates()[task]
		events := ts.GetEvents()
		for i := len(events) - 1; i >= 0; i-- {
			if events[i].GetFailed() || (ts.GetFailed() && i == len(events)-1) {
				parts = append(parts, fmt.Sprintf("task %q: %s: %s", task, events[i].GetType(), eventText(events[i])))
				break
			}
		}
	}
	return strings.Join(parts, "; ")
}

// eventText is an event's message, else its details.
func eventText(ev *pb.TaskEvent) string {
	if ev.GetMessage() != "" {
		return ev.GetMessage()
	}
	var kv []string
	for _, k := range sortedKeys(ev.GetDetails()) {
		kv = append(kv, k+"="+ev.GetDetails()[k])
	}
	return strings.Join(kv, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

func pick[T any](cond bool, a, b T) T {
	if cond {
		return a
	}
	return b
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// run follows the evaluation evalID made by the write at index and, with
// allocs, the allocs it placed until they run. A placement or alloc that
// failed ends in exit code 2, after the reason was printed.
func (m *monitor) run(evalID string, index uint64, allocs bool) error {
	e, err := m.followEval(evalID, index)
	if err != nil {
		return err
	}
	placed, at, ok, err := m.reportEval(e)
	if err != nil {
		return err
	}
	if ok && allocs {
		ok, err = m.followAllocs(e.GetJobId(), placed, at)
		if err != nil {
			return err
		}
	}
	if !ok {
		return silentExit(exitPlacementFailed)
	}
	return nil
}

func newMonitor(c *cli.Context, client *api.Client) *monitor {
	return &monitor{ctx: c.Context, client: client, w: c.App.Writer}
}
