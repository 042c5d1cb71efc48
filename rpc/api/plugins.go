package api

import (
	"context"
	"net/url"

	"berth.dev/berth/rpc/pb"
)

// CSIPlugins is the CSI plugin part of the API: c.CSIPlugins().List(ctx, q).
type CSIPlugins struct{ c *Client }

// CSIPlugins returns the plugin endpoints.
func (c *Client) CSIPlugins() *CSIPlugins { return &CSIPlugins{c} }

// List returns one page of plugins in ID order, counts only (no instances
// or allocations); q.Params may hold {"prefix": "ebs"}. AllPages(ctx, q,
// c.CSIPlugins().List) reads them all.
func (p *CSIPlugins) List(ctx context.Context, q *QueryOptions) ([]*pb.CSIPlugin, *QueryMeta, error) {
	return getList(ctx, p.c, "/v1/plugins", q, func() *pb.CSIPlugin { return &pb.CSIPlugin{} })
}

// Info returns a plugin by its exact ID, with its instances by node and
// the allocations that run it.
func (p *CSIPlugins) Info(ctx context.Context, id string, q *QueryOptions) (*pb.CSIPlugin, *QueryMeta, error) {
	out := &pb.CSIPlugin{}
	meta, err := p.c.getJSON(ctx, "/v1/plugin/csi/"+url.PathEscape(id), q, out)
	if err != nil {
		return nil, nil, err
	}
	return out, meta, nil
}
