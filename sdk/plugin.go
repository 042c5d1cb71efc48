package sdk

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	hclog "github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/executor"
)

// grpcPlugin is the go-plugin glue. On the plugin side impl is the driver;
// on the client side impl is nil and GRPCClient builds a DriverClient.
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	impl Driver
	name string
}

var _ plugin.GRPCPlugin = (*grpcPlugin)(nil)

// GRPCServer registers the driver service.
func (p *grpcPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.impl == nil {
		return fmt.Errorf("sdk: driver plugin served without a driver")
	}
	name := p.name
	if name == "" {
		if info, err := p.impl.PluginInfo(context.Background()); err == nil {
			name = info.GetName()
		}
	}
	driverpb.RegisterDriverServer(s, &grpcServer{impl: p.impl, name: name})
	return nil
}

// GRPCClient returns a *DriverClient. doneCtx ends when go-plugin sees the
// plugin process exit, which is how calls tell a dead plugin apart.
func (p *grpcPlugin) GRPCClient(doneCtx context.Context, _ *plugin.GRPCBroker, conn *grpc.ClientConn) (interface{}, error) {
	return newDriverClient(conn, doneCtx.Done()), nil
}

// PluginSet returns the go-plugin plugin set serving d. ServeDriver uses it;
// in-process tests pass it to plugin.TestPluginGRPCConn and dispense the
// client with DispenseDriver.
func PluginSet(d Driver) plugin.PluginSet {
	return plugin.PluginSet{PluginTypeDriver: &grpcPlugin{impl: d}}
}

// RegisterDriver registers d's gRPC service on s, to serve a driver
// without go-plugin (e.g. in-process tests over plugin.TestGRPCConn).
func RegisterDriver(s *grpc.Server, d Driver) {
	name := ""
	if info, err := d.PluginInfo(context.Background()); err == nil {
		name = info.GetName()
	}
	driverpb.RegisterDriverServer(s, &grpcServer{impl: d, name: name})
}

// ConnectDriver returns a client for the driver served on conn (see
// RegisterDriver) after negotiating the API version. Without go-plugin
// watching a process, the connection is the plugin: a call that finds it
// broken (a bare Unavailable) fails with ErrPluginShutdown.
func ConnectDriver(ctx context.Context, conn grpc.ClientConnInterface) (*DriverClient, error) {
	c := newDriverClient(conn, nil)
	if err := c.negotiate(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// clientPluginSet is what a client dispenses from.
func clientPluginSet() plugin.PluginSet {
	return plugin.PluginSet{PluginTypeDriver: &grpcPlugin{}}
}

// ServeDriver serves d as a go-plugin driver plugin on this process's
// stdio and blocks until berth shuts the plugin down. Call it from main.
//
// It first checks whether the process is an executor re-executed by a
// driver that uses sdk/executor; if so it runs the executor and exits
// instead. It returns ErrNotPluginProcess when the process was not started
// by berth, and an error when the driver's schemas are invalid.
func ServeDriver(d Driver) error {
	return ServeDriverWith(d, ServeOptions{})
}

// ServeOptions tune ServeDriverWith.
type ServeOptions struct {
	// Logger receives go-plugin's own logs; default NewPluginLogger.
	Logger hclog.Logger
	// Test serves in go-plugin's test mode (reattach config on a channel,
	// no cookie check); nil for a real plugin.
	Test *plugin.ServeTestConfig
}

// ServeDriverWith is ServeDriver with options.
func ServeDriverWith(d Driver, opts ServeOptions) error {
	if executor.Requested() {
		os.Exit(executor.Main())
	}
	if opts.Test == nil && os.Getenv(Handshake.MagicCookieKey) != Handshake.MagicCookieValue {
		return ErrNotPluginProcess
	}
	// After an agent crash a reattached plugin's stderr (where its logger
	// writes) is a pipe nobody reads. The Go runtime kills a process whose
	// write to fd 1 or 2 meets EPIPE unless SIGPIPE is notified; with it
	// the write just fails and the plugin keeps its tasks. Notify rather
	// than Ignore, so processes the driver starts get the default action.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	ctx := context.Background()
	info, err := d.PluginInfo(ctx)
	if err != nil {
		return fmt.Errorf("driver plugin info: %w", err)
	}
	schemas, err := d.ConfigSchema(ctx)
	if err != nil {
		return fmt.Errorf("driver %s: config schema: %w", info.GetName(), err)
	}
	if err := CheckSchema(schemas.GetPlugin()); err != nil {
		return fmt.Errorf("driver %s: plugin config schema: %w", info.GetName(), err)
	}
	if err := CheckSchema(schemas.GetTask()); err != nil {
		return fmt.Errorf("driver %s: task config schema: %w", info.GetName(), err)
	}
	logger := opts.Logger
	if logger == nil {
		logger = NewPluginLogger(info.GetName())
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         plugin.PluginSet{PluginTypeDriver: &grpcPlugin{impl: d, name: info.GetName()}},
		GRPCServer:      GRPCServer,
		Logger:          logger,
		Test:            opts.Test,
	})
	return nil
}

// NewPluginLogger returns the logger a plugin should use: JSON lines on the
// process's original stderr, which go-plugin parses and re-logs through
// berth's logger under the plugin's name. The level comes from
// BERTH_PLUGIN_LOG_LEVEL (trace, debug, info, warn, error; default info).
func NewPluginLogger(name string) hclog.Logger {
	level := hclog.LevelFromString(strings.TrimSpace(os.Getenv("BERTH_PLUGIN_LOG_LEVEL")))
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	return hclog.New(&hclog.LoggerOptions{
		Name:       name,
		Level:      level,
		Output:     os.Stderr,
		JSONFormat: true,
	})
}
