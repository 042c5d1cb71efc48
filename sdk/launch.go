package sdk

import (
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"

	"berth.dev/berth/sdk/procfs"
)

// DispenseDriver dispenses the driver from a go-plugin connection (a real
// plugin's, or plugin.TestPluginGRPCConn's over PluginSet) and negotiates
// the API version. It is the typed form of ClientProtocol.Dispense.
func DispenseDriver(ctx context.Context, rpc plugin.ClientProtocol) (*DriverClient, error) {
	raw, err := rpc.Dispense(PluginTypeDriver)
	if err != nil {
		return nil, fmt.Errorf("dispense driver: %w", err)
	}
	dc, ok := raw.(*DriverClient)
	if !ok {
		return nil, fmt.Errorf("dispense driver: plugin set served %T, not a berth driver", raw)
	}
	if err := dc.negotiate(ctx); err != nil {
		return nil, err
	}
	return dc, nil
}

// LaunchConfig says how to reach a driver plugin: start Cmd, or reattach to
// a running plugin.
type LaunchConfig struct {
	// Name is how berth refers to the plugin in logs and errors until the
	// plugin reports its own name.
	Name string
	// Cmd starts a new plugin process. Its environment gets go-plugin's
	// handshake variables added.
	Cmd *exec.Cmd
	// Reattach connects to a plugin a previous berth process started.
	Reattach *Reattach
	// Logger receives the plugin's logs; default: discard.
	Logger hclog.Logger
	// StartTimeout bounds the handshake; default 30s. ctx bounds the whole
	// launch.
	StartTimeout time.Duration
	// Stderr, when set, gets a copy of the raw stderr of a plugin this call
	// starts (not of a reattached one), e.g. to tell an operator why a
	// plugin died before its handshake. Writes come from one goroutine.
	Stderr io.Writer
}

// Reattach is what berth persists to reconnect to a running plugin after
// berth itself restarts. It is plain data: store it as JSON or in a proto.
type Reattach struct {
	Pid int `json:"pid"`
	// Network and Address are the plugin's listener ("unix", "/tmp/plugin123").
	Network string `json:"network"`
	Address string `json:"address"`
}

func (r Reattach) config() (*plugin.ReattachConfig, error) {
	var addr net.Addr
	var err error
	switch r.Network {
	case "unix":
		addr, err = net.ResolveUnixAddr("unix", r.Address)
	case "tcp":
		addr, err = net.ResolveTCPAddr("tcp", r.Address)
	default:
		err = fmt.Errorf("unsupported network %q", r.Network)
	}
	if err != nil {
		return nil, fmt.Errorf("reattach to plugin pid %d: %w", r.Pid, err)
	}
	return &plugin.ReattachConfig{Protocol: plugin.ProtocolGRPC, Addr: addr, Pid: r.Pid}, nil
}

// DriverPlugin is a running driver plugin process and its client.
type DriverPlugin struct {
	client *plugin.Client
	driver *DriverClient
}

// LaunchDriver starts (or reattaches to) a driver plugin, completes the
// go-plugin handshake, dispenses the driver and negotiates the API version.
// On error while ctx has not ended, no process is left running that this
// call started: one it started has been reaped, and cfg.Cmd.ProcessState
// says how it exited. Once ctx ends it returns ctx's error without waiting
// for the handshake, which cannot be interrupted; the process is then
// stopped and reaped in the background, and cfg.Cmd must not be read.
func LaunchDriver(ctx context.Context, cfg LaunchConfig) (*DriverPlugin, error) {
	client, rpc, err := startPlugin(ctx, "driver", cfg, Handshake, clientPluginSet())
	if err != nil {
		return nil, err
	}
	dc, err := DispenseDriver(ctx, rpc)
	if err != nil {
		client.Kill()
		return nil, fmt.Errorf("launch driver %s: %w", cfg.Name, err)
	}
	if alive := processAlive(client); alive != nil {
		dc.proc.alive = alive
	}
	return &DriverPlugin{client: client, driver: dc}, nil
}

// processAlive returns a liveness check of client's process that sees
// through a reused PID, or nil when the process cannot be identified.
func processAlive(client *plugin.Client) func() bool {
	rc := client.ReattachConfig()
	if rc == nil || rc.Pid <= 0 {
		return nil
	}
	id, err := procfs.Self(rc.Pid)
	if err != nil {
		return nil
	}
	return func() bool {
		alive, err := id.Alive()
		return alive || err != nil // an unreadable /proc says nothing
	}
}

// startPlugin starts (or reattaches to) a go-plugin plugin of the given
// kind ("driver", "storage adapter") and completes the handshake; see
// LaunchDriver for what is left behind on error.
func startPlugin(ctx context.Context, kind string, cfg LaunchConfig, hs plugin.HandshakeConfig, set plugin.PluginSet) (*plugin.Client, plugin.ClientProtocol, error) {
	if (cfg.Cmd == nil) == (cfg.Reattach == nil) {
		return nil, nil, fmt.Errorf("launch %s: exactly one of Cmd and Reattach must be set", kind)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	timeout := cfg.StartTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	// go-plugin's handshake cannot be interrupted (Kill waits for it), so
	// it must give up on its own by ctx's deadline.
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(min(timeout, time.Until(dl)), time.Millisecond)
	}
	cc := &plugin.ClientConfig{
		HandshakeConfig:  hs,
		Plugins:          set,
		Cmd:              cfg.Cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		GRPCDialOptions:  dialOptions(),
		Logger:           logger.Named(cfg.Name),
		StartTimeout:     timeout,
		Stderr:           cfg.Stderr,
	}
	if cfg.Reattach != nil {
		rc, err := cfg.Reattach.config()
		if err != nil {
			return nil, nil, err
		}
		cc.Reattach = rc
	}
	client := plugin.NewClient(cc)

	type result struct {
		rpc plugin.ClientProtocol
		err error
	}
	done := make(chan result, 1)
	// go-plugin's handshake takes no context; race it against ctx.
	go func() {
		rpc, err := client.Client()
		done <- result{rpc, err}
	}()
	var res result
	select {
	case res = <-done:
	case <-ctx.Done():
		// Clean up once the handshake ends, without making the caller wait.
		go func() {
			<-done
			client.Kill()
		}()
		return nil, nil, fmt.Errorf("launch %s %s: %w", kind, cfg.Name, ctx.Err())
	}
	if res.err != nil {
		client.Kill()
		if ctx.Err() != nil {
			// The handshake timed out at ctx's deadline: say so as ctx's error.
			return nil, nil, fmt.Errorf("launch %s %s: %w: %v", kind, cfg.Name, ctx.Err(), res.err)
		}
		return nil, nil, fmt.Errorf("launch %s %s: %w", kind, cfg.Name, res.err)
	}
	return client, res.rpc, nil
}

// reattachOf returns what to persist to reconnect to client's process.
func reattachOf(client *plugin.Client) (Reattach, bool) {
	rc := client.ReattachConfig()
	if rc == nil || rc.Addr == nil {
		return Reattach{}, false
	}
	return Reattach{Pid: rc.Pid, Network: rc.Addr.Network(), Address: rc.Addr.String()}, true
}

// pidOf returns client's process ID, or 0 if unknown.
func pidOf(client *plugin.Client) int {
	if rc := client.ReattachConfig(); rc != nil {
		return rc.Pid
	}
	return 0
}

// Driver is the plugin's driver.
func (p *DriverPlugin) Driver() *DriverClient { return p.driver }

// Exited reports whether the plugin process has exited: go-plugin saw it,
// or the process itself is gone (a zombie, or no longer there) while
// go-plugin still waits for pipes a surviving child of the plugin holds.
func (p *DriverPlugin) Exited() bool { return p.client.Exited() || p.driver.proc.exited() }

// Reattach returns what to persist to reconnect to this plugin later.
func (p *DriverPlugin) Reattach() (Reattach, bool) { return reattachOf(p.client) }

// Pid returns the plugin's process ID, or 0 if unknown.
func (p *DriverPlugin) Pid() int { return pidOf(p.client) }

// Kill shuts the plugin down: gracefully, then by force after two seconds.
// Tasks the plugin started keep running (a driver must not tie their life
// to its own); a new plugin recovers them with RecoverTask.
func (p *DriverPlugin) Kill() { p.client.Kill() }
