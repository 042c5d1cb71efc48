package ui

import (
	"context"
	"net/http"
	"sort"
	"sync"

	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
)

// pageList is every page but the overview, whose pattern is /ui/{$}.
var pageList = []*page{pageOverview, pageJobs, pageJob, pageAlloc, pageNodes, pageNode, pagePlugins, pagePlugin, pageVolumes, pageVolume}

// attentionStates are the claim states a claim passes through on its way
// to in-use or to freed: a claim that stays in one is stuck, and the
// overview lists it with its reason.
var attentionStates = []pb.ClaimState{pb.ClaimState_CLAIM_STATE_RESERVED, pb.ClaimState_CLAIM_STATE_RELEASING, pb.ClaimState_CLAIM_STATE_NODE_DETACHED}

// attentionRows is how many claims of each such state the overview lists.
const attentionRows = 50

var pageOverview = &page{
	tmpl: "overview",
	nav:  "overview",
	watch: func(*http.Request) []watchRead {
		return []watchRead{watchNodes, watchJobs, watchPlugins, watchClaims}
	},
	load: loadOverview,
}

func watchNodes(ctx context.Context, c *api.Client, q *api.QueryOptions) (*api.QueryMeta, error) {
	_, m, err := c.Nodes(ctx, q)
	return m, err
}

func watchJobs(ctx context.Context, c *api.Client, q *api.QueryOptions) (*api.QueryMeta, error) {
	_, m, err := c.Jobs().List(ctx, q)
	return m, err
}

func watchPlugins(ctx context.Context, c *api.Client, q *api.QueryOptions) (*api.QueryMeta, error) {
	_, m, err := c.CSIPlugins().List(ctx, q)
	return m, err
}

func watchClaims(ctx context.Context, c *api.Client, q *api.QueryOptions) (*api.QueryMeta, error) {
	_, m, err := c.VolumeClaims().List(ctx, q)
	return m, err
}

func watchVolumes(ctx context.Context, c *api.Client, q *api.QueryOptions) (*api.QueryMeta, error) {
	_, m, err := c.Volumes().List(ctx, q)
	return m, err
}

// count is one status and how many are in it.
type count struct {
	Word string
	N    int
	// More: the list was cut at a page; N is a lower bound.
	More bool
}

// overview is the overview page. Each part carries its rows or the error
// that kept them: a token may read nodes and not jobs.
type overview struct {
	Servers    []*pb.RaftServer
	ServersErr *pageError
	Nodes      []count
	NodesTotal int
	NodesErr   *pageError
	Jobs       []count
	JobsTotal  int
	JobsErr    *pageError
	Plugins    []*pb.CSIPlugin
	PluginsErr *pageError
	// Attention are the claims in a state on the way (reserved,
	// releasing, node-detached) and the ready ones that carry an error,
	// with their reasons.
	Attention    []*pb.Claim
	AttentionBy  []count
	AttentionErr *pageError
}

// loadOverview makes the overview's reads at once, each section's on its
// own: the page takes as long as its slowest read (counting every node),
// not the sum of them.
func loadOverview(ctx context.Context, c *api.Client, _ *http.Request) (string, any, error) {
	o := &overview{}
	var wg sync.WaitGroup
	wg.Go(func() {
		if cfg, _, err := c.RaftConfiguration(ctx, nil); err != nil {
			o.ServersErr = asPageError(err)
		} else {
			o.Servers = cfg.GetServers()
		}
	})
	wg.Go(func() {
		if nodes, _, err := api.AllPages(ctx, &api.QueryOptions{PerPage: 1000}, c.Nodes); err != nil {
			o.NodesErr = asPageError(err)
		} else {
			by := map[string]int{}
			for _, n := range nodes {
				by[pb.EnumWord(n.GetStatus())]++
			}
			o.Nodes, o.NodesTotal = counts(by), len(nodes)
		}
	})
	wg.Go(func() {
		if jobs, _, err := api.AllPages(ctx, &api.QueryOptions{PerPage: 1000}, c.Jobs().List); err != nil {
			o.JobsErr = asPageError(err)
		} else {
			by := map[string]int{}
			for _, j := range jobs {
				by[pb.EnumWord(j.GetStatus())]++
			}
			o.Jobs, o.JobsTotal = counts(by), len(jobs)
		}
	})
	wg.Go(func() {
		if ps, _, err := c.CSIPlugins().List(ctx, &api.QueryOptions{PerPage: 100}); err != nil {
			o.PluginsErr = asPageError(err)
		} else {
			o.Plugins = ps
		}
	})
	claims := make([][]*pb.Claim, len(attentionStates))
	more := make([]bool, len(attentionStates))
	errs := make([]error, len(attentionStates))
	for i, st := range attentionStates {
		wg.Go(func() {
			cls, m, err := c.VolumeClaims().List(ctx, &api.QueryOptions{PerPage: attentionRows, Params: map[string]string{"state": pb.EnumWord(st)}})
			if err != nil {
				errs[i] = err
				return
			}
			claims[i], more[i] = cls, m.NextToken != ""
		})
	}
	wg.Wait()
	for i, st := range attentionStates {
		if errs[i] != nil {
			o.Attention, o.AttentionBy, o.AttentionErr = nil, nil, asPageError(errs[i])
			break
		}
		o.Attention = append(o.Attention, claims[i]...)
		o.AttentionBy = append(o.AttentionBy, count{Word: pb.EnumWord(st), N: len(claims[i]), More: more[i]})
	}
	if o.AttentionErr == nil {
		if cls, more, err := failingReady(ctx, c); err != nil {
			o.AttentionErr = asPageError(err)
		} else {
			o.Attention = append(o.Attention, cls...)
			o.AttentionBy = append(o.AttentionBy, count{Word: "ready, failing", N: len(cls), More: more})
		}
	}
	return "Overview", o, nil
}

func counts(by map[string]int) []count {
	out := make([]count, 0, len(by))
	for w, n := range by {
		out = append(out, count{Word: w, N: n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Word < out[j].Word })
	return out
}

// asPageError is an error as a section of a page shows it.
func asPageError(err error) *pageError {
	if ae, ok := err.(*api.Error); ok {
		return &pageError{Status: ae.StatusCode, Code: ae.Code, Message: ae.Message}
	}
	return &pageError{Status: http.StatusInternalServerError, Code: "internal", Message: err.Error()}
}
