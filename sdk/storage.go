package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/sdk/storagepb"
)

// Environment variables through which berth hands a storage adapter its
// configuration when it starts the process (see StorageAdapterEnv).
const (
	// EnvStorageConfig holds the adapter's plugin block config as a JSON
	// object ("{}" when there is none).
	EnvStorageConfig = "BERTH_STORAGE_CONFIG"
	// EnvStorageNodeID and EnvStorageNodeName are the node's ID and name.
	EnvStorageNodeID   = "BERTH_STORAGE_NODE_ID"
	EnvStorageNodeName = "BERTH_STORAGE_NODE_NAME"
	// EnvStorageDataDir is a directory the adapter owns, under the
	// client's data dir, kept across restarts of the adapter and of berth.
	EnvStorageDataDir = "BERTH_STORAGE_DATA_DIR"
)

// StorageEnv is what berth tells a storage adapter about where it runs.
type StorageEnv struct {
	// Config is the adapter's plugin block config (a JSON object).
	Config json.RawMessage
	NodeID string
	// NodeName is the node's name (what ${node.unique.name} gives a task).
	NodeName string
	// DataDir is the adapter's own persistent directory.
	DataDir string
}

// StorageAdapterEnv reads the environment berth gave this adapter process.
// Call it before building the CSI servers; it fails with
// ErrNotAdapterProcess when berth did not start the process.
func StorageAdapterEnv() (StorageEnv, error) {
	if os.Getenv(StorageHandshake.MagicCookieKey) != StorageHandshake.MagicCookieValue {
		return StorageEnv{}, ErrNotAdapterProcess
	}
	env := StorageEnv{
		Config:   json.RawMessage(os.Getenv(EnvStorageConfig)),
		NodeID:   os.Getenv(EnvStorageNodeID),
		NodeName: os.Getenv(EnvStorageNodeName),
		DataDir:  os.Getenv(EnvStorageDataDir),
	}
	if len(env.Config) == 0 {
		env.Config = json.RawMessage("{}")
	}
	var obj map[string]any
	if err := json.Unmarshal(env.Config, &obj); err != nil {
		return StorageEnv{}, fmt.Errorf("%s is not a JSON object: %w", EnvStorageConfig, err)
	}
	return env, nil
}

// StorageAdapter is a CSI plugin to serve as a storage adapter.
type StorageAdapter struct {
	// Name is the adapter's name, which berth checks against its catalog
	// name (the plugin block's label, or the executable's name).
	Name string
	// Identity is required; Controller and Node are served when set.
	Identity   csipb.IdentityServer
	Controller csipb.ControllerServer
	Node       csipb.NodeServer
	// Register, when set, registers further services (e.g. a CSI
	// GroupController) on the same server.
	Register func(*grpc.Server)
	// ServerOptions are added to go-plugin's gRPC server options, e.g. an
	// interceptor that logs calls or recovers from panics.
	ServerOptions []grpc.ServerOption
}

func (a StorageAdapter) check() error {
	switch {
	case a.Name == "":
		return errors.New("storage adapter: Name is required")
	case a.Identity == nil:
		return fmt.Errorf("storage adapter %s: Identity is required", a.Name)
	case a.Controller == nil && a.Node == nil:
		return fmt.Errorf("storage adapter %s: serves neither Controller nor Node", a.Name)
	}
	return nil
}

// storagePlugin is the go-plugin glue. On the adapter side it registers the
// CSI services; on berth's side (zero value) GRPCClient wraps the conn.
type storagePlugin struct {
	plugin.NetRPCUnsupportedPlugin
	impl *StorageAdapter
}

var _ plugin.GRPCPlugin = (*storagePlugin)(nil)

// GRPCServer registers the CSI services and the negotiation service on
// go-plugin's server, so berth reaches them on the plugin's connection.
func (p *storagePlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.impl == nil {
		return errors.New("sdk: storage plugin served without an adapter")
	}
	a := p.impl
	storagepb.RegisterStorageAdapterServer(s, &storageServer{name: a.Name})
	csipb.RegisterIdentityServer(s, a.Identity)
	if a.Controller != nil {
		csipb.RegisterControllerServer(s, a.Controller)
	}
	if a.Node != nil {
		csipb.RegisterNodeServer(s, a.Node)
	}
	if a.Register != nil {
		a.Register(s)
	}
	return nil
}

// GRPCClient returns a *StorageClient. doneCtx ends when go-plugin sees the
// adapter process exit.
func (p *storagePlugin) GRPCClient(doneCtx context.Context, _ *plugin.GRPCBroker, conn *grpc.ClientConn) (interface{}, error) {
	return &StorageClient{conn: conn, done: doneCtx.Done(), neg: storagepb.NewStorageAdapterClient(conn)}, nil
}

type storageServer struct {
	storagepb.UnimplementedStorageAdapterServer
	name string
}

func (s *storageServer) Negotiate(_ context.Context, req *storagepb.NegotiateRequest) (*storagepb.NegotiateResponse, error) {
	v, ok := pickStorageAPIVersion(req.GetApiVersions())
	if !ok {
		return nil, status.Errorf(codes.FailedPrecondition, "storage adapter %q speaks storage API %d to %d, berth offers %v",
			s.name, MinStorageAPIVersion, StorageAPIVersion, req.GetApiVersions())
	}
	return &storagepb.NegotiateResponse{ApiVersion: v, Name: s.name}, nil
}

// StoragePluginSet returns the go-plugin plugin set serving a. In-process
// tests pass it to plugin.TestPluginGRPCConn and dispense the client with
// DispenseStorageAdapter.
func StoragePluginSet(a StorageAdapter) plugin.PluginSet {
	return plugin.PluginSet{PluginTypeStorage: &storagePlugin{impl: &a}}
}

func storageClientPluginSet() plugin.PluginSet {
	return plugin.PluginSet{PluginTypeStorage: &storagePlugin{}}
}

// ServeStorageAdapter serves a as a go-plugin storage adapter on this
// process's stdio and blocks until berth shuts it down. Call it from main,
// after StorageAdapterEnv. It returns ErrNotAdapterProcess when berth did not
// start the process, and an error when a lacks a required server.
func ServeStorageAdapter(a StorageAdapter) error {
	return ServeStorageAdapterWith(a, ServeOptions{})
}

// ServeStorageAdapterWith is ServeStorageAdapter with options.
func ServeStorageAdapterWith(a StorageAdapter, opts ServeOptions) error {
	if err := a.check(); err != nil {
		return err
	}
	if opts.Test == nil && os.Getenv(StorageHandshake.MagicCookieKey) != StorageHandshake.MagicCookieValue {
		return ErrNotAdapterProcess
	}
	// As for drivers: a reattached adapter's stderr may be a pipe nobody
	// reads after berth restarted; a write must fail, not kill it.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	logger := opts.Logger
	if logger == nil {
		logger = NewPluginLogger(a.Name)
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: StorageHandshake,
		Plugins:         StoragePluginSet(a),
		GRPCServer: func(o []grpc.ServerOption) *grpc.Server {
			return GRPCServer(append(o, a.ServerOptions...))
		},
		Logger: logger,
		Test:   opts.Test,
	})
	return nil
}

// StorageClient is berth's side of a storage adapter: the negotiated API
// version and the gRPC connection on which the CSI services are served.
type StorageClient struct {
	conn       *grpc.ClientConn
	done       <-chan struct{}
	neg        storagepb.StorageAdapterClient
	name       string
	apiVersion uint32
}

// Conn is the connection to the adapter's CSI services (csi.New(conn)).
func (c *StorageClient) Conn() *grpc.ClientConn { return c.conn }

// Name is the name the adapter reported in Negotiate.
func (c *StorageClient) Name() string { return c.name }

// APIVersion is the negotiated storage API version.
func (c *StorageClient) APIVersion() uint32 { return c.apiVersion }

// Done is closed when go-plugin sees the adapter process exit; nil for a
// client not backed by a process.
func (c *StorageClient) Done() <-chan struct{} { return c.done }

func (c *StorageClient) negotiate(ctx context.Context) error {
	resp, err := c.neg.Negotiate(ctx, &storagepb.NegotiateRequest{ApiVersions: supportedStorageAPIVersions()})
	if status.Code(err) == codes.FailedPrecondition {
		return fmt.Errorf("%w: %s", ErrIncompatibleAPI, status.Convert(err).Message())
	}
	if err != nil {
		return fmt.Errorf("storage adapter Negotiate: %w", err)
	}
	if _, ok := pickStorageAPIVersion([]uint32{resp.GetApiVersion()}); !ok {
		return fmt.Errorf("%w: adapter %q chose storage API version %d, this sdk speaks %d to %d",
			ErrIncompatibleAPI, resp.GetName(), resp.GetApiVersion(), MinStorageAPIVersion, StorageAPIVersion)
	}
	c.name, c.apiVersion = resp.GetName(), resp.GetApiVersion()
	return nil
}

// DispenseStorageAdapter dispenses the storage adapter from a go-plugin
// connection and negotiates the API version: the typed form of
// ClientProtocol.Dispense.
func DispenseStorageAdapter(ctx context.Context, rpc plugin.ClientProtocol) (*StorageClient, error) {
	raw, err := rpc.Dispense(PluginTypeStorage)
	if err != nil {
		return nil, fmt.Errorf("dispense storage adapter: %w", err)
	}
	sc, ok := raw.(*StorageClient)
	if !ok {
		return nil, fmt.Errorf("dispense storage adapter: plugin set served %T, not a berth storage adapter", raw)
	}
	if err := sc.negotiate(ctx); err != nil {
		return nil, err
	}
	return sc, nil
}

// StoragePlugin is a running storage adapter process and its client.
type StoragePlugin struct {
	client  *plugin.Client
	adapter *StorageClient
	alive   func() bool
}

// LaunchStorageAdapter starts (or reattaches to) a storage adapter process,
// completes the go-plugin handshake (StorageHandshake), dispenses the
// adapter and negotiates the storage API version. What it leaves behind on
// error is as for LaunchDriver. cfg.Cmd's environment should carry the
// Env* variables (StorageAdapterEnv).
func LaunchStorageAdapter(ctx context.Context, cfg LaunchConfig) (*StoragePlugin, error) {
	client, rpc, err := startPlugin(ctx, "storage adapter", cfg, StorageHandshake, storageClientPluginSet())
	if err != nil {
		return nil, err
	}
	sc, err := DispenseStorageAdapter(ctx, rpc)
	if err != nil {
		client.Kill()
		return nil, fmt.Errorf("launch storage adapter %s: %w", cfg.Name, err)
	}
	return &StoragePlugin{client: client, adapter: sc, alive: processAlive(client)}, nil
}

// Adapter is the adapter's client.
func (p *StoragePlugin) Adapter() *StorageClient { return p.adapter }

// Exited reports whether the adapter process has exited (go-plugin saw it,
// or the process is gone while go-plugin still waits for its pipes).
func (p *StoragePlugin) Exited() bool {
	return p.client.Exited() || (p.alive != nil && !p.alive())
}

// Reattach returns what to persist to reconnect to this adapter later.
func (p *StoragePlugin) Reattach() (Reattach, bool) { return reattachOf(p.client) }

// Pid returns the adapter's process ID, or 0 if unknown.
func (p *StoragePlugin) Pid() int { return pidOf(p.client) }

// Kill shuts the adapter down: gracefully, then by force after two seconds.
func (p *StoragePlugin) Kill() { p.client.Kill() }
