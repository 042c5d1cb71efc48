package agent

import (
	"context"
	"net/http"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc"

	"berth.dev/berth/rpc/pb"
)

// HeaderCSISecrets carries CSI secrets on requests without a body (snapshot
// list and delete): "key=value,key2=value2", as Nomad's X-Nomad-CSI-Secrets.
const HeaderCSISecrets = "X-Berth-CSI-Secrets"

// csiSecrets reads HeaderCSISecrets; a malformed pair is refused without
// echoing it (it may be a secret).
func csiSecrets(r *http.Request) (map[string]string, error) {
	h := r.Header.Get(HeaderCSISecrets)
	if h == "" {
		return nil, nil
	}
	out := map[string]string{}
	for i, kv := range strings.Split(h, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, badRequest("header %s: entry %d is not key=value", HeaderCSISecrets, i+1)
		}
		if !utf8.ValidString(kv) {
			return nil, badRequest("header %s: entry %d is not valid UTF-8", HeaderCSISecrets, i+1)
		}
		out[strings.TrimSpace(k)] = v
	}
	return out, nil
}

func (a *Agent) volumes(ctx context.Context, fn func(context.Context, pb.VolumesClient) error) error {
	return a.rpcCall(ctx, func(ctx context.Context, c *grpc.ClientConn) error { return fn(ctx, pb.NewVolumesClient(c)) })
}

// volumeList is GET /v1/volumes: one page of volumes in ID order, each with
// its claims and attachments; ?plugin_id=, ?node_id=, ?prefix= filter;
// ?type=csi is accepted (the only type). Blocking.
func (a *Agent) volumeList(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	if t := r.URL.Query().Get("type"); t != "" && t != "csi" {
		return badRequest(`query parameter type=%q: the only volume type is "csi"`, t)
	}
	v := r.URL.Query()
	req := &pb.VolumeListRequest{Query: q, PluginId: v.Get("plugin_id"), NodeId: v.Get("node_id"), Prefix: v.Get("prefix")}
	var resp *pb.VolumeListResponse
	if err := a.volumes(r.Context(), func(ctx context.Context, c pb.VolumesClient) (err error) {
		resp, err = c.List(ctx, req)
		return err
	}); err != nil {
		return err
	}
	setQueryHeaders(w, resp.GetMeta())
	return writeProtoList(w, resp.GetVolumes())
}

// volumeGet is GET /v1/volume/csi/{id}: the volume with its claims and
// attachments (VolumeView), secrets redacted. Blocking.
func (a *Agent) volumeGet(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	var resp *pb.VolumeGetResponse
	if err := a.volumes(r.Context(), func(ctx context.Context, c pb.VolumesClient) (err error) {
		resp, err = c.Get(ctx, &pb.VolumeGetRequest{VolumeId: r.PathValue("id"), Query: q})
		return err
	}); err != nil {
		return err
	}
	setQueryHeaders(w, resp.GetMeta())
	return writeProto(w, resp.GetVolume())
}

// volumeRegister is PUT/POST /v1/volume/csi/{id} with a
// VolumeRegisterRequest body ({"volume": {...}}); the path's ID wins.
func (a *Agent) volumeRegister(w http.ResponseWriter, r *http.Request) error {
	return a.volumeWrite(w, r, false)
}

// volumeCreate is PUT/POST /v1/volume/csi/{id}/create with a
// VolumeCreateRequest body.
func (a *Agent) volumeCreate(w http.ResponseWriter, r *http.Request) error {
	return a.volumeWrite(w, r, true)
}

func (a *Agent) volumeWrite(w http.ResponseWriter, r *http.Request, create bool) error {
	id := r.PathValue("id")
	var vol *pb.Volume
	if create {
		req := &pb.VolumeCreateRequest{}
		if err := decodeBody(w, r, req, false); err != nil {
			return err
		}
		vol = req.GetVolume()
	} else {
		req := &pb.VolumeRegisterRequest{}
		if err := decodeBody(w, r, req, false); err != nil {
			return err
		}
		vol = req.GetVolume()
	}
	if vol == nil {
		return badRequest("request body: volume is required")
	}
	if err := samePathID("volume.id", vol.GetId(), id); err != nil {
		return err
	}
	vol.Id = id
	var resp *pb.VolumeRegisterResponse
	if err := a.volumes(r.Context(), func(ctx context.Context, c pb.VolumesClient) (err error) {
		if create {
			resp, err = c.Create(ctx, &pb.VolumeCreateRequest{Volume: vol})
		} else {
			resp, err = c.Register(ctx, &pb.VolumeRegisterRequest{Volume: vol})
		}
		return err
	}); err != nil {
		return err
	}
	setWriteHeaders(w, resp.GetMeta())
	return writeProto(w, resp)
}

// volumeDeregister is DELETE /v1/volume/csi/{id} (?force=true).
func (a *Agent) volumeDeregister(w http.ResponseWriter, r *http.Request) error {
	force, err := queryBool(r, "force")
	if err != nil {
		return err
	}
	var resp *pb.VolumeDeleteResponse
	if err := a.volumes(r.Context(), func(ctx context.Context, c pb.VolumesClient) (err error) {
		resp, err = c.Deregister(ctx, &pb.VolumeDeregisterRequest{VolumeId: r.PathValue("id"), Force: force})
		return err
	}); err != nil {
		return err
	}
	setWriteHeaders(w, resp.GetMeta())
	return writeProto(w, resp)
}

// volumeDelete is DELETE (or PUT/POST) /v1/volume/csi/{id}/delete: the
// plugin deletes the volume, then it is deregistered. Secrets come from an
// optional {"secrets": {...}} body or the X-Berth-CSI-Secrets header.
func (a *Agent) volumeDelete(w http.ResponseWriter, r *http.Request) error {
	req := &pb.VolumeDeleteRequest{}
	if err := decodeBody(w, r, req, true); err != nil {
		return err
	}
	if err := samePathID("volume_id", req.GetVolumeId(), r.PathValue("id")); err != nil {
		return err
	}
	req.VolumeId = r.PathValue("id")
	if len(req.GetSecrets()) == 0 {
		s, err := csiSecrets(r)
		if err != nil {
			return err
		}
		req.Secrets = s
	}
	var resp *pb.VolumeDeleteResponse
	if err := a.volumes(r.Context(), func(ctx context.Context, c pb.VolumesClient) (err error) {
		resp, err = c.Delete(ctx, req)
		return err
	}); err != nil {
		return err
	}
	setWriteHeaders(w, resp.GetMeta())
	return writeProto(w, resp)
}

// volumeClaims is GET /v1/volume/csi/{id}/claims: the volume's claims,
// paged by claim ID. Blocking.
func (a *Agent) volumeClaims(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	var resp *pb.VolumeClaimsResponse
	if err := a.volumes(r.Context(), func(ctx context.Context, c pb.VolumesClient) (err error) {
		resp, err = c.Claims(ctx, &pb.VolumeClaimsRequest{VolumeId: r.PathValue("id"), Query: q})
		return err
	}); err != nil {
		return err
	}
	setQueryHeaders(w, resp.GetMeta())
	return writeProtoList(w, resp.GetClaims())
}

// volumeExpand is PUT/POST /v1/volume/csi/{id}/expand with a
// VolumeExpandRequest body.
func (a *Agent) volumeExpand(w http.ResponseWriter, r *http.Request) error {
	req := &pb.VolumeExpandRequest{}
	if err := decodeBody(w, r, req, false); err != nil {
		return err
	}
	if err := samePathID("volume_id", req.GetVolumeId(), r.PathValue("id")); err != nil {
		return err
	}
	req.VolumeId = r.PathValue("id")
	var resp *pb.VolumeExpandResponse
	if err := a.volumes(r.Context(), func(ctx context.Context, c pb.VolumesClient) (err error) {
		resp, err = c.Expand(ctx, req)
		return err
	}); err != nil {
		return err
	}
	setWriteHeaders(w, resp.GetMeta())
	return writeProto(w, resp)
}

// snapshotList is GET /v1/volumes/snapshot (?plugin_id=, ?volume_id=,
// paged with the plugin's tokens; secrets in X-Berth-CSI-Secrets).
func (a *Agent) snapshotList(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	secrets, err := csiSecrets(r)
	if err != nil {
		return err
	}
	v := r.URL.Query()
	req := &pb.SnapshotListRequest{PluginId: v.Get("plugin_id"), VolumeId: v.Get("volume_id"), Secrets: secrets, Query: q}
	var resp *pb.SnapshotListResponse
	if err := a.volumes(r.Context(), func(ctx context.Context, c pb.VolumesClient) (err error) {
		resp, err = c.ListSnapshots(ctx, req)
		return err
	}); err != nil {
		return err
	}
	setQueryHeaders(w, resp.GetMeta())
	return writeProtoList(w, resp.GetSnapshots())
}

// snapshotCreate is PUT/POST /v1/volumes/snapshot with a
// SnapshotCreateRequest body.
func (a *Agent) snapshotCreate(w http.ResponseWriter, r *http.Request) error {
	req := &pb.SnapshotCreateRequest{}
	if err := decodeBody(w, r, req, false); err != nil {
		return err
	}
	var resp *pb.SnapshotCreateResponse
	if err := a.volumes(r.Context(), func(ctx context.Context, c pb.VolumesClient) (err error) {
		resp, err = c.CreateSnapshot(ctx, req)
		return err
	}); err != nil {
		return err
	}
	return writeProto(w, resp.GetSnapshot())
}

// snapshotDelete is DELETE /v1/volumes/snapshot?plugin_id=&snapshot_id=
// (secrets in X-Berth-CSI-Secrets).
func (a *Agent) snapshotDelete(w http.ResponseWriter, r *http.Request) error {
	secrets, err := csiSecrets(r)
	if err != nil {
		return err
	}
	v := r.URL.Query()
	req := &pb.SnapshotDeleteRequest{PluginId: v.Get("plugin_id"), SnapshotId: v.Get("snapshot_id"), Secrets: secrets}
	if req.PluginId == "" || req.SnapshotId == "" {
		return badRequest("query parameters plugin_id and snapshot_id are required")
	}
	var resp *pb.SnapshotDeleteResponse
	if err := a.volumes(r.Context(), func(ctx context.Context, c pb.VolumesClient) (err error) {
		resp, err = c.DeleteSnapshot(ctx, req)
		return err
	}); err != nil {
		return err
	}
	return writeProto(w, resp)
}
