package ui

import (
	"context"
	"net/http"
	"sort"

	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
)

var pageNodes = &page{
	tmpl:    "nodes",
	pattern: "/ui/nodes",
	nav:     "nodes",
	watch:   func(*http.Request) []watchRead { return []watchRead{watchNodes} },
	load: func(ctx context.Context, c *api.Client, r *http.Request) (string, any, error) {
		nodes, m, err := c.Nodes(ctx, &api.QueryOptions{PerPage: perPage, NextToken: r.URL.Query().Get("next")})
		if err != nil {
			return "", nil, err
		}
		rows := make([]nodeRow, len(nodes))
		for i, n := range nodes {
			rows[i] = newNodeRow(n)
		}
		return "Nodes", &listPage[nodeRow]{Items: rows, Next: m.NextToken, Base: "/ui/nodes"}, nil
	},
}

// nodeRow is a node with its counts as the lists show them.
type nodeRow struct {
	Node           *pb.Node
	DriversHealthy int
	DriversTotal   int
	// NodePlugins are the IDs of the CSI node plugins it serves.
	NodePlugins []string
}

func newNodeRow(n *pb.Node) nodeRow {
	r := nodeRow{Node: n}
	for _, d := range n.GetDrivers() {
		if d.GetDetected() {
			r.DriversTotal++
			if d.GetHealthy() {
				r.DriversHealthy++
			}
		}
	}
	r.NodePlugins = sortedKeys(n.GetCsiNodePlugins())
	return r
}

var pageNode = &page{
	tmpl:    "node",
	pattern: "/ui/nodes/{id}",
	nav:     "nodes",
	watch: func(r *http.Request) []watchRead {
		id := r.PathValue("id")
		return []watchRead{
			func(ctx context.Context, c *api.Client, q *api.QueryOptions) (*api.QueryMeta, error) {
				_, m, err := c.Node(ctx, id, q)
				return m, err
			},
			func(ctx context.Context, c *api.Client, q *api.QueryOptions) (*api.QueryMeta, error) {
				_, m, err := c.NodeOps().Allocations(ctx, id, q)
				return m, err
			},
			watchClaimsOf("node_id", id),
		}
	},
	load: loadNode,
}

// watchClaimsOf watches the claims list filtered by one parameter.
func watchClaimsOf(param, value string) watchRead {
	return func(ctx context.Context, c *api.Client, q *api.QueryOptions) (*api.QueryMeta, error) {
		q.Params = map[string]string{param: value}
		_, m, err := c.VolumeClaims().List(ctx, q)
		return m, err
	}
}

// nodeView is the node page.
type nodeView struct {
	nodeRow
	Drivers     []*pb.DriverInfo
	Controllers []*pb.CSIPluginInfo
	NodeInfos   []*pb.CSIPluginInfo
	Claims      []*pb.Claim
	ClaimsErr   *pageError
	Allocs      []*pb.Allocation
	AllocsErr   *pageError
}

func loadNode(ctx context.Context, c *api.Client, r *http.Request) (string, any, error) {
	n, _, err := c.Node(ctx, r.PathValue("id"), nil)
	if err != nil {
		return "", nil, err
	}
	v := &nodeView{nodeRow: newNodeRow(n)}
	for _, name := range sortedKeys(n.GetDrivers()) {
		d := n.GetDrivers()[name]
		if d.GetName() == "" {
			d.Name = name
		}
		v.Drivers = append(v.Drivers, d)
	}
	for _, id := range sortedKeys(n.GetCsiControllerPlugins()) {
		p := n.GetCsiControllerPlugins()[id]
		if p.GetPluginId() == "" {
			p.PluginId = id
		}
		v.Controllers = append(v.Controllers, p)
	}
	for _, id := range sortedKeys(n.GetCsiNodePlugins()) {
		p := n.GetCsiNodePlugins()[id]
		if p.GetPluginId() == "" {
			p.PluginId = id
		}
		v.NodeInfos = append(v.NodeInfos, p)
	}
	// The claims and allocations are sections of their own: a token that
	// may read (and drain) the node but not list volumes still sees the
	// node, with the section's refusal in its place.
	if v.Claims, _, err = c.VolumeClaims().List(ctx, &api.QueryOptions{PerPage: perPage, Params: map[string]string{"node_id": n.GetId()}}); err != nil {
		v.ClaimsErr = asPageError(err)
	}
	if v.Allocs, _, err = c.NodeOps().Allocations(ctx, n.GetId(), &api.QueryOptions{PerPage: perPage}); err != nil {
		v.AllocsErr = asPageError(err)
	}
	sort.Slice(v.Allocs, func(i, j int) bool { return v.Allocs[i].GetCreateIndex() > v.Allocs[j].GetCreateIndex() })
	return "Node " + n.GetName(), v, nil
}

var pagePlugins = &page{
	tmpl:    "plugins",
	pattern: "/ui/plugins",
	nav:     "plugins",
	watch:   func(*http.Request) []watchRead { return []watchRead{watchPlugins} },
	load: func(ctx context.Context, c *api.Client, r *http.Request) (string, any, error) {
		ps, m, err := c.CSIPlugins().List(ctx, &api.QueryOptions{PerPage: perPage, NextToken: r.URL.Query().Get("next")})
		if err != nil {
			return "", nil, err
		}
		return "CSI plugins", &listPage[*pb.CSIPlugin]{Items: ps, Next: m.NextToken, Base: "/ui/plugins"}, nil
	},
}

var pagePlugin = &page{
	tmpl:    "plugin",
	pattern: "/ui/plugins/{id}",
	nav:     "plugins",
	watch: func(r *http.Request) []watchRead {
		id := r.PathValue("id")
		return []watchRead{func(ctx context.Context, c *api.Client, q *api.QueryOptions) (*api.QueryMeta, error) {
			_, m, err := c.CSIPlugins().Info(ctx, id, q)
			return m, err
		}}
	},
	load: loadPlugin,
}

// pluginView is the plugin page: its instances by node.
type pluginView struct {
	Plugin      *pb.CSIPlugin
	Controllers []instance
	Nodes       []instance
}

type instance struct {
	NodeID string
	Info   *pb.CSIPluginInfo
}

func loadPlugin(ctx context.Context, c *api.Client, r *http.Request) (string, any, error) {
	p, _, err := c.CSIPlugins().Info(ctx, r.PathValue("id"), nil)
	if err != nil {
		return "", nil, err
	}
	v := &pluginView{Plugin: p}
	for _, n := range sortedKeys(p.GetControllers()) {
		v.Controllers = append(v.Controllers, instance{NodeID: n, Info: p.GetControllers()[n]})
	}
	for _, n := range sortedKeys(p.GetNodes()) {
		v.Nodes = append(v.Nodes, instance{NodeID: n, Info: p.GetNodes()[n]})
	}
	return "Plugin " + p.GetId(), v, nil
}
