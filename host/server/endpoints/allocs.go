package endpoints

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"berth.dev/berth/internal/rules"

	"github.com/hashicorp/go-memdb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/evals"
	"berth.dev/berth/rpc/pb"
)

// allocsEndpoint reads and stops allocations.
type allocsEndpoint struct {
	pb.UnimplementedAllocsServer
	s *api
}

func (e *allocsEndpoint) Get(ctx context.Context, req *pb.AllocGetRequest) (*pb.AllocGetResponse, error) {
	resp := &pb.AllocGetResponse{}
	meta, err := e.s.BlockingRead(ctx, req.GetQuery(), func(ws memdb.WatchSet, st *fsm.StateSnapshot) (uint64, error) {
		a, err := st.AllocByID(ws, req.GetAllocId())
		if err != nil {
			return 0, err
		}
		resp.Alloc = a
		if a != nil {
			return a.GetModifyIndex(), nil
		}
		return st.Index(fsm.TableAllocs)
	})
	if err != nil {
		return nil, err
	}
	if resp.Alloc == nil {
		return nil, fmt.Errorf("allocation %s: %w", req.GetAllocId(), fsm.ErrAllocNotFound)
	}
	resp.Meta = meta
	return resp, nil
}

func (e *allocsEndpoint) List(ctx context.Context, req *pb.AllocListRequest) (*pb.AllocListResponse, error) {
	prefix, node, job := req.GetPrefix(), req.GetNodeId(), req.GetJobId()
	if node == "" && job == "" {
		return e.page(ctx, req)
	}
	return allocList(ctx, e.s, req.GetQuery(), func(ws memdb.WatchSet, st *fsm.StateSnapshot) ([]*pb.Allocation, error) {
		var (
			allocs []*pb.Allocation
			err    error
		)
		if node != "" {
			allocs, err = st.AllocsByNode(ws, node)
		} else {
			allocs, err = st.AllocsByJob(ws, job)
		}
		if err != nil {
			return nil, err
		}
		out := allocs[:0:0]
		for _, a := range allocs {
			if strings.HasPrefix(a.GetId(), prefix) && (job == "" || a.GetJobId() == job) && (node == "" || a.GetNodeId() == node) {
				out = append(out, a)
			}
		}
		return out, nil
	})
}

// page lists every alloc a page at a time from the table's primary index,
// so a page costs its own size (plus what the prefix skips), not the
// table's.
func (e *allocsEndpoint) page(ctx context.Context, req *pb.AllocListRequest) (*pb.AllocListResponse, error) {
	n, err := PerPage(req.GetQuery())
	if err != nil {
		return nil, err
	}
	prefix := req.GetPrefix()
	from := max(req.GetQuery().GetNextToken(), prefix)
	resp := &pb.AllocListResponse{}
	var next string
	meta, err := e.s.BlockingRead(ctx, req.GetQuery(), func(ws memdb.WatchSet, st *fsm.StateSnapshot) (uint64, error) {
		allocs, nextID, err := st.AllocsPage(ws, from, n, func(a *pb.Allocation) bool { return strings.HasPrefix(a.GetId(), prefix) })
		if err != nil {
			return 0, err
		}
		resp.Allocs, next = allocs, nextID
		return st.Index(fsm.TableAllocs)
	})
	if err != nil {
		return nil, err
	}
	meta.NextToken = next
	resp.Meta = meta
	return resp, nil
}

// allocList pages the allocs read returns, sorted by ID, and blocks on
// the allocs table.
func allocList(ctx context.Context, s *api, q *pb.QueryOptions, read func(memdb.WatchSet, *fsm.StateSnapshot) ([]*pb.Allocation, error)) (*pb.AllocListResponse, error) {
	n, err := PerPage(q)
	if err != nil {
		return nil, err
	}
	resp := &pb.AllocListResponse{}
	var next string
	meta, err := s.BlockingRead(ctx, q, func(ws memdb.WatchSet, st *fsm.StateSnapshot) (uint64, error) {
		allocs, err := read(ws, st)
		if err != nil {
			return 0, err
		}
		sort.Slice(allocs, func(i, j int) bool { return allocs[i].GetId() < allocs[j].GetId() })
		resp.Allocs, next = PageOf(allocs, (*pb.Allocation).GetId, q.GetNextToken(), n, nil)
		return st.Index(fsm.TableAllocs)
	})
	if err != nil {
		return nil, err
	}
	meta.NextToken = next
	resp.Meta = meta
	return resp, nil
}

// Stop asks the scheduler to stop an alloc: a desired transition (migrate,
// or no_replace) and an evaluation of its job in one command, so the
// replacement is placed by the same evaluation that stops it.
func (e *allocsEndpoint) Stop(ctx context.Context, req *pb.AllocStopRequest) (*pb.AllocStopResponse, error) {
	s := e.s
	snap := s.State().Snapshot()
	a, err := snap.AllocByID(nil, req.GetAllocId())
	if err != nil {
		return nil, err
	}
	if a == nil {
		return nil, fmt.Errorf("allocation %s: %w", req.GetAllocId(), fsm.ErrAllocNotFound)
	}
	if rules.AllocTerminal(a) {
		return nil, status.Errorf(codes.FailedPrecondition, "allocation %s is already stopped (desired %s, client %s)",
			a.GetId(), a.GetDesiredStatus(), a.GetClientStatus())
	}
	job, err := snap.JobByID(nil, a.GetJobId())
	if err != nil {
		return nil, err
	}
	if job == nil {
		job = &pb.Job{Id: a.GetJobId(), Priority: 50}
	}
	eval := evals.New(s.Clock.Now(), job, pb.EvalTrigger_EVAL_TRIGGER_ALLOC_STOP)
	idx, err := s.Apply(ctx, fsm.AllocDesiredTransition, &pb.AllocDesiredTransitionCommand{
		Allocs:    map[string]*pb.DesiredTransition{a.GetId(): {Migrate: true, NoReplace: req.GetNoReplace()}},
		Evals:     []*pb.Evaluation{eval},
		UpdatedAt: s.Clock.Now().UnixNano(),
	})
	if err != nil {
		return nil, fmt.Errorf("stopping allocation %s: %w", a.GetId(), err)
	}
	return &pb.AllocStopResponse{EvalId: eval.GetId(), Meta: &pb.WriteMeta{Index: idx}}, nil
}

// evalsEndpoint reads evaluations.
type evalsEndpoint struct {
	pb.UnimplementedEvalsServer
	s *api
}

func (e *evalsEndpoint) Get(ctx context.Context, req *pb.EvalGetRequest) (*pb.EvalGetResponse, error) {
	resp := &pb.EvalGetResponse{}
	meta, err := e.s.BlockingRead(ctx, req.GetQuery(), func(ws memdb.WatchSet, st *fsm.StateSnapshot) (uint64, error) {
		ev, err := st.EvalByID(ws, req.GetEvalId())
		if err != nil {
			return 0, err
		}
		resp.Eval = ev
		if ev != nil {
			return ev.GetModifyIndex(), nil
		}
		return st.Index(fsm.TableEvals)
	})
	if err != nil {
		return nil, err
	}
	if resp.Eval == nil {
		return nil, fmt.Errorf("evaluation %s: %w", req.GetEvalId(), fsm.ErrEvalNotFound)
	}
	resp.Meta = meta
	return resp, nil
}

func (e *evalsEndpoint) List(ctx context.Context, req *pb.EvalListRequest) (*pb.EvalListResponse, error) {
	prefix, job, want := req.GetPrefix(), req.GetJobId(), req.GetStatus()
	if want != pb.EvalStatus_EVAL_STATUS_UNSPECIFIED {
		if _, known := pb.EvalStatus_name[int32(want)]; !known {
			return nil, status.Errorf(codes.InvalidArgument, "evaluation list: unknown status filter %d", want)
		}
	}
	return evalList(ctx, e.s, req.GetQuery(), func(ws memdb.WatchSet, st *fsm.StateSnapshot) ([]*pb.Evaluation, error) {
		var (
			evals []*pb.Evaluation
			err   error
		)
		if job != "" {
			evals, err = st.EvalsByJob(ws, job)
		} else {
			evals, _, err = st.EvalsPage(ws, "", 0, nil)
		}
		if err != nil {
			return nil, err
		}
		out := evals[:0:0]
		for _, ev := range evals {
			if strings.HasPrefix(ev.GetId(), prefix) && (want == pb.EvalStatus_EVAL_STATUS_UNSPECIFIED || ev.GetStatus() == want) {
				out = append(out, ev)
			}
		}
		return out, nil
	})
}

// evalList pages the evaluations read returns, sorted by ID.
func evalList(ctx context.Context, s *api, q *pb.QueryOptions, read func(memdb.WatchSet, *fsm.StateSnapshot) ([]*pb.Evaluation, error)) (*pb.EvalListResponse, error) {
	n, err := PerPage(q)
	if err != nil {
		return nil, err
	}
	resp := &pb.EvalListResponse{}
	var next string
	meta, err := s.BlockingRead(ctx, q, func(ws memdb.WatchSet, st *fsm.StateSnapshot) (uint64, error) {
		evals, err := read(ws, st)
		if err != nil {
			return 0, err
		}
		sort.Slice(evals, func(i, j int) bool { return evals[i].GetId() < evals[j].GetId() })
		resp.Evals, next = PageOf(evals, (*pb.Evaluation).GetId, q.GetNextToken(), n, nil)
		return st.Index(fsm.TableEvals)
	})
	if err != nil {
		return nil, err
	}
	meta.NextToken = next
	resp.Meta = meta
	return resp, nil
}
