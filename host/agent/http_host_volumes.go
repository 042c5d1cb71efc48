package agent

import (
	"context"
	"net/http"

	"google.golang.org/grpc"

	"berth.dev/berth/rpc/pb"
)

func (a *Agent) hostVolumes(ctx context.Context, fn func(context.Context, pb.HostVolumesClient) error) error {
	return a.rpcCall(ctx, func(ctx context.Context, c *grpc.ClientConn) error { return fn(ctx, pb.NewHostVolumesClient(c)) })
}

// hostVolumeCreate is PUT/POST /v1/volumes/host with a
// HostVolumeCreateRequest body ({"volume": {...}}): the dynamic host
// volume is made on its node and recorded.
func (a *Agent) hostVolumeCreate(w http.ResponseWriter, r *http.Request) error {
	req := &pb.HostVolumeCreateRequest{}
	if err := decodeBody(w, r, req, false); err != nil {
		return err
	}
	if req.GetVolume() == nil {
		return badRequest("request body: volume is required")
	}
	var resp *pb.HostVolumeCreateResponse
	if err := a.hostVolumes(r.Context(), func(ctx context.Context, c pb.HostVolumesClient) (err error) {
		resp, err = c.Create(ctx, req)
		return err
	}); err != nil {
		return err
	}
	setWriteHeaders(w, &pb.WriteMeta{Index: resp.GetIndex()})
	return writeProto(w, resp)
}

// hostVolumeList is GET /v1/volumes/host: the dynamic host volumes in ID
// order; ?node_id= keeps a node's. Blocking.
func (a *Agent) hostVolumeList(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	var resp *pb.HostVolumeListResponse
	if err := a.hostVolumes(r.Context(), func(ctx context.Context, c pb.HostVolumesClient) (err error) {
		resp, err = c.List(ctx, &pb.HostVolumeListRequest{Query: q, NodeId: r.URL.Query().Get("node_id")})
		return err
	}); err != nil {
		return err
	}
	setQueryHeaders(w, resp.GetMeta())
	return writeProtoList(w, resp.GetVolumes())
}

// hostVolumeGet is GET /v1/volume/host/{id}. Blocking.
func (a *Agent) hostVolumeGet(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	var resp *pb.HostVolumeGetResponse
	if err := a.hostVolumes(r.Context(), func(ctx context.Context, c pb.HostVolumesClient) (err error) {
		resp, err = c.Get(ctx, &pb.HostVolumeGetRequest{Id: r.PathValue("id"), Query: q})
		return err
	}); err != nil {
		return err
	}
	setQueryHeaders(w, resp.GetMeta())
	return writeProto(w, resp.GetVolume())
}

// hostVolumeDelete is DELETE /v1/volume/host/{id}[?force=true]: the
// node's plugin removes the volume, then it is forgotten; refused while
// claimed. force: forgotten without the node (gone, down or fenced).
func (a *Agent) hostVolumeDelete(w http.ResponseWriter, r *http.Request) error {
	force, err := queryBool(r, "force")
	if err != nil {
		return err
	}
	var resp *pb.HostVolumeDeleteResponse
	if err := a.hostVolumes(r.Context(), func(ctx context.Context, c pb.HostVolumesClient) (err error) {
		resp, err = c.Delete(ctx, &pb.HostVolumeDeleteRequest{Id: r.PathValue("id"), Force: force})
		return err
	}); err != nil {
		return err
	}
	setWriteHeaders(w, &pb.WriteMeta{Index: resp.GetIndex()})
	return writeProto(w, resp)
}
