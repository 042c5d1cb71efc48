package agent

import (
	"context"
	"net/http"

	"google.golang.org/grpc"

	"berth.dev/berth/rpc/pb"
)

// pluginList is GET /v1/plugins: one page of CSI plugins in ID order,
// counts only; ?prefix= keeps the IDs starting with it. ?type=csi is
// accepted, as Nomad's API takes it; CSI is the only plugin type listed.
func (a *Agent) pluginList(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	if t := r.URL.Query().Get("type"); t != "" && t != "csi" {
		return badRequest(`query parameter type=%q: the only plugin type is "csi"`, t)
	}
	req := &pb.CSIPluginListRequest{Query: q, Prefix: r.URL.Query().Get("prefix")}
	var resp *pb.CSIPluginListResponse
	err = a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewCSIPluginsClient(c).List(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	setQueryHeaders(w, resp.GetMeta())
	return writeProtoList(w, resp.GetPlugins())
}

// pluginGet is GET /v1/plugin/csi/{id} (Nomad's path) and /v1/plugin/{id}:
// one plugin with its instances by node and its allocations; a blocking
// query.
func (a *Agent) pluginGet(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	req := &pb.CSIPluginGetRequest{PluginId: r.PathValue("id"), Query: q}
	var resp *pb.CSIPluginGetResponse
	err = a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewCSIPluginsClient(c).Get(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	setQueryHeaders(w, resp.GetMeta())
	return writeProto(w, resp.GetPlugin())
}
