package agent

import (
	"context"
	"net/http"

	"berth.dev/berth/rpc/pb"
)

// volumeDetach is DELETE /v1/volume/csi/{id}/detach?node=<node ID> (as
// Nomad's): the volume taken off the node (Volumes.Detach). No body.
func (a *Agent) volumeDetach(w http.ResponseWriter, r *http.Request) error {
	node := r.URL.Query().Get("node")
	if node == "" {
		return badRequest("query parameter node is required")
	}
	req := &pb.VolumeDetachRequest{VolumeId: r.PathValue("id"), NodeId: node}
	var resp *pb.VolumeDetachResponse
	if err := a.volumes(r.Context(), func(ctx context.Context, c pb.VolumesClient) (err error) {
		resp, err = c.Detach(ctx, req)
		return err
	}); err != nil {
		return err
	}
	setWriteHeaders(w, resp.GetMeta())
	return writeProto(w, resp)
}
