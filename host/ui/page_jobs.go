package ui

import (
	"context"
	"net/http"
	"sort"

	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
)

// perPage is the rows of a list page, the API's default page.
const perPage = 100

var pageJobs = &page{
	tmpl:    "jobs",
	pattern: "/ui/jobs",
	nav:     "jobs",
	watch:   func(*http.Request) []watchRead { return []watchRead{watchJobs} },
	load: func(ctx context.Context, c *api.Client, r *http.Request) (string, any, error) {
		jobs, m, err := c.Jobs().List(ctx, &api.QueryOptions{PerPage: perPage, NextToken: r.URL.Query().Get("next")})
		if err != nil {
			return "", nil, err
		}
		return "Jobs", &listPage[*pb.JobListStub]{Items: jobs, Next: m.NextToken, Base: "/ui/jobs"}, nil
	},
}

// listPage is one page of a list, with the token of the next.
type listPage[T any] struct {
	Items []T
	Next  string
	Base  string
}

var pageJob = &page{
	tmpl:    "job",
	pattern: "/ui/jobs/{id}",
	nav:     "jobs",
	watch: func(r *http.Request) []watchRead {
		id := r.PathValue("id")
		return []watchRead{
			func(ctx context.Context, c *api.Client, q *api.QueryOptions) (*api.QueryMeta, error) {
				_, m, err := c.Jobs().Info(ctx, id, q)
				return m, err
			},
			func(ctx context.Context, c *api.Client, q *api.QueryOptions) (*api.QueryMeta, error) {
				_, m, err := c.Jobs().Allocations(ctx, id, q)
				return m, err
			},
			func(ctx context.Context, c *api.Client, q *api.QueryOptions) (*api.QueryMeta, error) {
				_, m, err := c.Jobs().Evaluations(ctx, id, q)
				return m, err
			},
		}
	},
	load: loadJob,
}

// jobView is the job page.
type jobView struct {
	Job      *pb.Job
	Versions []*pb.Job
	Groups   []groupView
	Allocs   []*pb.Allocation
	Evals    []*pb.Evaluation
}

type groupView struct {
	Group   *pb.TaskGroup
	Summary *pb.GroupSummary
	Volumes []*pb.VolumeRequest
}

func loadJob(ctx context.Context, c *api.Client, r *http.Request) (string, any, error) {
	id := r.PathValue("id")
	job, _, err := c.Jobs().Info(ctx, id, nil)
	if err != nil {
		return "", nil, err
	}
	v := &jobView{Job: job}
	if v.Versions, _, err = c.Jobs().Versions(ctx, id, nil); err != nil {
		return "", nil, err
	}
	sum, _, err := c.Jobs().Summary(ctx, id, nil)
	if err != nil {
		return "", nil, err
	}
	for _, g := range job.GetGroups() {
		gv := groupView{Group: g, Summary: sum.GetGroups()[g.GetName()]}
		for _, name := range sortedKeys(g.GetVolumes()) {
			gv.Volumes = append(gv.Volumes, g.GetVolumes()[name])
		}
		v.Groups = append(v.Groups, gv)
	}
	if v.Allocs, _, err = c.Jobs().Allocations(ctx, id, &api.QueryOptions{PerPage: perPage}); err != nil {
		return "", nil, err
	}
	sort.Slice(v.Allocs, func(i, j int) bool { return v.Allocs[i].GetCreateIndex() > v.Allocs[j].GetCreateIndex() })
	if v.Evals, _, err = c.Jobs().Evaluations(ctx, id, &api.QueryOptions{PerPage: perPage}); err != nil {
		return "", nil, err
	}
	sort.Slice(v.Evals, func(i, j int) bool { return v.Evals[i].GetCreateIndex() > v.Evals[j].GetCreateIndex() })
	return "Job " + job.GetId(), v, nil
}

var pageAlloc = &page{
	tmpl:    "alloc",
	pattern: "/ui/allocs/{id}",
	nav:     "jobs",
	watch: func(r *http.Request) []watchRead {
		id := r.PathValue("id")
		return []watchRead{func(ctx context.Context, c *api.Client, q *api.QueryOptions) (*api.QueryMeta, error) {
			_, m, err := c.Allocations().Info(ctx, id, q)
			return m, err
		}}
	},
	load: loadAlloc,
}

// allocView is the allocation page.
type allocView struct {
	Alloc *pb.Allocation
	Tasks []taskView
}

type taskView struct {
	Name  string
	State *pb.TaskState
	// Events are newest first.
	Events []*pb.TaskEvent
}

func loadAlloc(ctx context.Context, c *api.Client, r *http.Request) (string, any, error) {
	a, _, err := c.Allocations().Info(ctx, r.PathValue("id"), nil)
	if err != nil {
		return "", nil, err
	}
	v := &allocView{Alloc: a}
	for _, name := range sortedKeys(a.GetTaskStates()) {
		st := a.GetTaskStates()[name]
		evs := append([]*pb.TaskEvent(nil), st.GetEvents()...)
		sort.SliceStable(evs, func(i, j int) bool { return evs[i].GetOccurredAt() > evs[j].GetOccurredAt() })
		v.Tasks = append(v.Tasks, taskView{Name: name, State: st, Events: evs})
	}
	return "Allocation " + shortID(a.GetId()), v, nil
}
