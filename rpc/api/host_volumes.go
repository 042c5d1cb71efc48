package api

import (
	"context"
	"net/http"
	"net/url"

	"berth.dev/berth/rpc/pb"
)

// HostVolumes are the dynamic host volume endpoints.
type HostVolumes struct{ c *Client }

// HostVolumes returns the dynamic host volume endpoints.
func (c *Client) HostVolumes() *HostVolumes { return &HostVolumes{c} }

// Create has a node's host volume plugin make vol (on vol's node_id, or a
// node the servers pick by its constraints) and records it; with the ID
// of a recorded volume it makes it again and updates the record.
func (h *HostVolumes) Create(ctx context.Context, vol *pb.HostVolume) (*pb.HostVolumeCreateResponse, error) {
	out := &pb.HostVolumeCreateResponse{}
	return out, h.c.write(ctx, http.MethodPut, "/v1/volumes/host", nil, &pb.HostVolumeCreateRequest{Volume: vol}, out)
}

// List returns the dynamic host volumes in ID order; q.Params may hold
// "node_id".
func (h *HostVolumes) List(ctx context.Context, q *QueryOptions) ([]*pb.HostVolume, *QueryMeta, error) {
	return getList(ctx, h.c, "/v1/volumes/host", q, func() *pb.HostVolume { return &pb.HostVolume{} })
}

// Info returns a dynamic host volume by its exact ID.
func (h *HostVolumes) Info(ctx context.Context, id string, q *QueryOptions) (*pb.HostVolume, *QueryMeta, error) {
	out := &pb.HostVolume{}
	meta, err := h.c.getJSON(ctx, "/v1/volume/host/"+url.PathEscape(id), q, out)
	if err != nil {
		return nil, nil, err
	}
	return out, meta, nil
}

// Delete has the volume's node remove it, then forgets it; refused while
// a claim holds it.
func (h *HostVolumes) Delete(ctx context.Context, id string) (*pb.HostVolumeDeleteResponse, error) {
	return h.DeleteOpts(ctx, id, false)
}

// DeleteOpts is Delete; force forgets a volume whose node is gone, down
// or fenced without asking it (the answer's warning says its data may
// remain).
func (h *HostVolumes) DeleteOpts(ctx context.Context, id string, force bool) (*pb.HostVolumeDeleteResponse, error) {
	out := &pb.HostVolumeDeleteResponse{}
	var q url.Values
	if force {
		q = url.Values{"force": {"true"}}
	}
	return out, h.c.write(ctx, http.MethodDelete, "/v1/volume/host/"+url.PathEscape(id), q, nil, out)
}
