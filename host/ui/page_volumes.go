package ui

import (
	"context"
	"net/http"
	"sort"

	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
)

var pageVolumes = &page{
	tmpl:    "volumes",
	pattern: "/ui/volumes",
	nav:     "volumes",
	watch:   func(*http.Request) []watchRead { return []watchRead{watchVolumes, watchClaims} },
	load: func(ctx context.Context, c *api.Client, r *http.Request) (string, any, error) {
		vs, m, err := c.Volumes().List(ctx, &api.QueryOptions{PerPage: perPage, NextToken: r.URL.Query().Get("next")})
		if err != nil {
			return "", nil, err
		}
		rows := make([]volumeRow, len(vs))
		for i, v := range vs {
			rows[i] = newVolumeRow(v)
		}
		return "Volumes", &listPage[volumeRow]{Items: rows, Next: m.NextToken, Base: "/ui/volumes"}, nil
	},
}

// volumeRow is a volume with its claims counted by state.
type volumeRow struct {
	View   *pb.VolumeView
	Claims []count
	// Failing counts the claims and attachments carrying a last error.
	Failing int
}

func newVolumeRow(v *pb.VolumeView) volumeRow {
	by := map[string]int{}
	r := volumeRow{View: v}
	for _, c := range v.GetClaims() {
		by[pb.EnumWord(c.GetState())]++
		if c.GetLastError() != nil {
			r.Failing++
		}
	}
	for _, a := range v.GetAttachments() {
		if a.GetLastError() != nil {
			r.Failing++
		}
	}
	r.Claims = counts(by)
	return r
}

var pageVolume = &page{
	tmpl:    "volume",
	pattern: "/ui/volumes/{id}",
	nav:     "volumes",
	watch: func(r *http.Request) []watchRead {
		id := r.PathValue("id")
		return []watchRead{func(ctx context.Context, c *api.Client, q *api.QueryOptions) (*api.QueryMeta, error) {
			_, m, err := c.Volumes().Info(ctx, id, q)
			return m, err
		}}
	},
	load: loadVolume,
}

// volumeView is the volume page.
type volumeView struct {
	View       *pb.VolumeView
	Claims     []*pb.Claim
	Parameters []keyValue
	Context    []keyValue
}

type keyValue struct{ Key, Value string }

func keyValues(m map[string]string) []keyValue {
	out := make([]keyValue, 0, len(m))
	for _, k := range sortedKeys(m) {
		out = append(out, keyValue{k, m[k]})
	}
	return out
}

func loadVolume(ctx context.Context, c *api.Client, r *http.Request) (string, any, error) {
	vv, _, err := c.Volumes().Info(ctx, r.PathValue("id"), nil)
	if err != nil {
		return "", nil, err
	}
	v := &volumeView{View: vv, Claims: append([]*pb.Claim(nil), vv.GetClaims()...)}
	sort.SliceStable(v.Claims, func(i, j int) bool { return v.Claims[i].GetCreateIndex() < v.Claims[j].GetCreateIndex() })
	// Secrets are never read into a page; parameters and context are the
	// plugin's plain configuration.
	v.Parameters = keyValues(vv.GetVolume().GetParameters())
	v.Context = keyValues(vv.GetVolume().GetContext())
	return "Volume " + vv.GetVolume().GetId(), v, nil
}
