package api

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// HeaderCSISecrets carries CSI secrets on the requests that have no body
// (snapshot list and delete), as "key=value,key2=value2" (Nomad's
// X-Nomad-CSI-Secrets).
const HeaderCSISecrets = "X-Berth-CSI-Secrets"

// ErrSecretsHeader is returned when secrets meant for HeaderCSISecrets
// cannot be written in it: a key with '=' or ',', a value with ','. The
// request is not sent.
var ErrSecretsHeader = errcode.New(codes.InvalidArgument, "api: CSI secrets cannot travel in the "+HeaderCSISecrets+" header")

// Volumes is the CSI volume part of the API: c.Volumes().List(ctx, q), ...
type Volumes struct{ c *Client }

// Volumes returns the volume endpoints.
func (c *Client) Volumes() *Volumes { return &Volumes{c} }

func volumePath(id, rest string) string { return "/v1/volume/csi/" + url.PathEscape(id) + rest }

// List returns one page of volumes in ID order, each with its claims and
// attachments; q.Params may hold "plugin_id", "node_id" (volumes with a
// claim or an attachment on the node) and "prefix". AllPages(ctx, q,
// c.Volumes().List) reads them all.
func (v *Volumes) List(ctx context.Context, q *QueryOptions) ([]*pb.VolumeView, *QueryMeta, error) {
	return getList(ctx, v.c, "/v1/volumes", q, func() *pb.VolumeView { return &pb.VolumeView{} })
}

// Info returns a volume by its exact ID with its claims and attachments.
func (v *Volumes) Info(ctx context.Context, id string, q *QueryOptions) (*pb.VolumeView, *QueryMeta, error) {
	out := &pb.VolumeView{}
	meta, err := v.c.getJSON(ctx, volumePath(id, ""), q, out)
	if err != nil {
		return nil, nil, err
	}
	return out, meta, nil
}

// Claims returns one page of a volume's claims by claim ID.
func (v *Volumes) Claims(ctx context.Context, id string, q *QueryOptions) ([]*pb.Claim, *QueryMeta, error) {
	return getList(ctx, v.c, volumePath(id, "/claims"), q, func() *pb.Claim { return &pb.Claim{} })
}

// Register registers (or updates) vol after its plugin validated its
// capabilities; the answer has the volume as stored (secrets redacted)
// and the warnings of what was not checked.
func (v *Volumes) Register(ctx context.Context, vol *pb.Volume) (*pb.VolumeRegisterResponse, error) {
	if vol.GetId() == "" {
		return nil, fmt.Errorf("api: Register needs a volume with an ID")
	}
	out := &pb.VolumeRegisterResponse{}
	return out, v.c.write(ctx, http.MethodPut, volumePath(vol.GetId(), ""), nil, &pb.VolumeRegisterRequest{Volume: vol}, out)
}

// Create has the plugin create vol, then registers it.
func (v *Volumes) Create(ctx context.Context, vol *pb.Volume) (*pb.VolumeRegisterResponse, error) {
	if vol.GetId() == "" {
		return nil, fmt.Errorf("api: Create needs a volume with an ID")
	}
	out := &pb.VolumeRegisterResponse{}
	return out, v.c.write(ctx, http.MethodPut, volumePath(vol.GetId(), "/create"), nil, &pb.VolumeCreateRequest{Volume: vol}, out)
}

// Deregister forgets a volume without a plugin call; force deregisters it
// when every claimant is terminal.
func (v *Volumes) Deregister(ctx context.Context, id string, force bool) (*pb.VolumeDeleteResponse, error) {
	var q url.Values
	if force {
		q = url.Values{"force": {"true"}}
	}
	out := &pb.VolumeDeleteResponse{}
	return out, v.c.write(ctx, http.MethodDelete, volumePath(id, ""), q, nil, out)
}

// Delete has the plugin delete the volume, then deregisters it; secrets
// (sent in the body) replace the stored ones when given.
func (v *Volumes) Delete(ctx context.Context, id string, secrets map[string]string) (*pb.VolumeDeleteResponse, error) {
	// An interface, not a *pb.VolumeDeleteRequest: a typed nil would be a
	// non-nil body to write.
	var in proto.Message
	if len(secrets) > 0 {
		in = &pb.VolumeDeleteRequest{Secrets: secrets}
	}
	out := &pb.VolumeDeleteResponse{}
	return out, v.c.write(ctx, http.MethodDelete, volumePath(id, "/delete"), nil, in, out)
}

// Expand grows a volume to at least req's capacity_min_bytes.
func (v *Volumes) Expand(ctx context.Context, req *pb.VolumeExpandRequest) (*pb.VolumeExpandResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, fmt.Errorf("api: Expand needs a volume ID")
	}
	out := &pb.VolumeExpandResponse{}
	return out, v.c.write(ctx, http.MethodPut, volumePath(req.GetVolumeId(), "/expand"), nil, req, out)
}

// CreateSnapshot snapshots a volume with its plugin.
func (v *Volumes) CreateSnapshot(ctx context.Context, req *pb.SnapshotCreateRequest) (*pb.Snapshot, error) {
	out := &pb.Snapshot{}
	return out, v.c.write(ctx, http.MethodPut, "/v1/volumes/snapshot", nil, req, out)
}

// Snapshots returns one page of a plugin's snapshots; q.Params may hold
// "volume_id" (then pluginID may be "": the volume's plugin is asked). The page tokens are the plugin's own and need not sort, so
// follow QueryMeta.NextToken by hand rather than with Pages.
func (v *Volumes) Snapshots(ctx context.Context, pluginID string, secrets map[string]string, q *QueryOptions) ([]*pb.Snapshot, *QueryMeta, error) {
	const path = "/v1/volumes/snapshot"
	vals, err := q.values()
	if err != nil {
		return nil, nil, fmt.Errorf("GET %s: %w", path, err)
	}
	if pluginID != "" {
		vals.Set("plugin_id", pluginID)
	}
	hdr, err := secretsHeader(secrets)
	if err != nil {
		return nil, nil, fmt.Errorf("GET %s: %w", path, err)
	}
	resp, err := v.c.doHeader(ctx, http.MethodGet, path, vals, nil, hdr)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("GET %s: reading response: %w", path, err)
	}
	out, err := apijson.UnmarshalList(b, func() *pb.Snapshot { return &pb.Snapshot{} })
	if err != nil {
		return nil, nil, fmt.Errorf("GET %s: decoding response: %w", path, err)
	}
	return out, parseMeta(resp.Header, "GET "+path), nil
}

// DeleteSnapshot deletes a plugin's snapshot.
func (v *Volumes) DeleteSnapshot(ctx context.Context, pluginID, snapshotID string, secrets map[string]string) error {
	const path = "/v1/volumes/snapshot"
	hdr, err := secretsHeader(secrets)
	if err != nil {
		return fmt.Errorf("DELETE %s: %w", path, err)
	}
	resp, err := v.c.doHeader(ctx, http.MethodDelete, path, url.Values{"plugin_id": {pluginID}, "snapshot_id": {snapshotID}}, nil, hdr)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// secretsHeader writes secrets as HeaderCSISecrets, keys sorted; nil for
// none. The error names the key at fault, never a value.
func secretsHeader(secrets map[string]string) (http.Header, error) {
	if len(secrets) == 0 {
		return nil, nil
	}
	keys := make([]string, 0, len(secrets))
	for k := range secrets {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	pairs := make([]string, 0, len(keys))
	for _, k := range keys {
		if k == "" || strings.ContainsAny(k, "=,") {
			return nil, fmt.Errorf("%w: key %q is empty or has '=' or ','", ErrSecretsHeader, k)
		}
		if strings.Contains(secrets[k], ",") {
			return nil, fmt.Errorf("%w: the value of %q has a ','", ErrSecretsHeader, k)
		}
		pairs = append(pairs, k+"="+secrets[k])
	}
	return http.Header{HeaderCSISecrets: {strings.Join(pairs, ",")}}, nil
}

// Detach takes volume id off node nodeID (a full node ID), whose allocs no
// longer use it: DELETE /v1/volume/csi/{id}/detach?node=.
func (v *Volumes) Detach(ctx context.Context, id, nodeID string) (*pb.VolumeDetachResponse, error) {
	if id == "" || nodeID == "" {
		return nil, fmt.Errorf("api: Detach needs a volume ID and a node ID")
	}
	out := &pb.VolumeDetachResponse{}
	return out, v.c.write(ctx, http.MethodDelete, volumePath(id, "/detach"), url.Values{"node": {nodeID}}, nil, out)
}
