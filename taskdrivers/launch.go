package taskdrivers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"time"

	plugin "github.com/hashicorp/go-plugin"

	"berth.dev/berth/internal/pluginproc"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// launch brings up the plugin: reattached from rec when that works, else a
// new process; then configured and with its tasks recovered. On error no
// process it started is left running.
func (in *instance) launch(ctx context.Context, rec *pb.DriverPluginRecord) (*running, error) {
	ctx, cancel := context.WithTimeout(ctx, in.m.cfg.StartTimeout)
	defer cancel()
	launchedAt := time.Now()
	var proc *sdk.DriverPlugin
	var sockDir string
	if rec != nil {
		proc = in.reattach(ctx, rec)
		if proc != nil {
			launchedAt = time.Unix(0, rec.GetLaunchedAt())
			sockDir = ownedSocketDir(in.p.Name, rec.GetReattach().GetAddress())
		}
	}
	if proc == nil {
		if err := in.check(); err != nil {
			return nil, err
		}
		var err error
		sockDir, err = pluginproc.NewSocketDir("driver", in.p.Name)
		if err != nil {
			return nil, in.p.errorf(errcode.Fallback(ErrPluginStart, fmt.Errorf("socket directory: %w", err)))
		}
		// One per attempt: the process of an attempt abandoned when ctx
		// ended may still be writing while the next attempt starts.
		stderr := &pluginproc.TailWriter{}
		cmd := exec.Command(in.p.Path, in.p.Args...)
		cmd.Env = []string{plugin.EnvUnixSocketDir + "=" + sockDir}
		proc, err = sdk.LaunchDriver(ctx, sdk.LaunchConfig{
			Name:         in.p.Name,
			Cmd:          cmd,
			Logger:       in.m.logger,
			StartTimeout: in.m.cfg.StartTimeout,
			Stderr:       stderr,
		})
		if err != nil {
			os.RemoveAll(sockDir)
			return nil, in.p.errorf(in.startError(ctx, cmd, stderr, err))
		}
	}
	r, err := in.setup(ctx, proc)
	if err != nil {
		proc.Kill()
		removeSocketDir(sockDir)
		in.m.deleteRecord(in.p.Name)
		return nil, err
	}
	r.startedAt = time.Now()
	r.sockDir = sockDir
	in.saveRecord(proc, launchedAt)
	return r, nil
}

// ownedSocketDir returns the directory of a reattached plugin's socket if
// this package created it, else "".
func ownedSocketDir(driver, addr string) string {
	return pluginproc.OwnedSocketDir("driver", driver, addr)
}

// stop shuts r's plugin process down and removes its socket directory.
func (r *running) stop() {
	r.proc.Kill()
	removeSocketDir(r.sockDir)
}

func removeSocketDir(dir string) { pluginproc.RemoveSocketDir(dir) }

// startError describes a failed launch of cmd by LaunchDriver(ctx, ...),
// with the last lines the process wrote to stderr. A process that failed
// by itself before the handshake is described by its exit rather than by
// go-plugin's generic handshake diagnostics, which go to the log. A
// failure after the handshake (an *sdk.RPCError, e.g. no common API
// version) is the error itself: the process then exited because
// LaunchDriver stopped it.
//
// The exit is only read while ctx has not ended: LaunchDriver has then
// reaped the process. Once ctx ends it returns at once and leaves the
// process to be stopped in the background, where go-plugin's cmd.Wait
// still writes cmd.ProcessState.
func (in *instance) startError(ctx context.Context, cmd *exec.Cmd, stderr *pluginproc.TailWriter, err error) error {
	tail := stderr.Summary()
	if ctx.Err() != nil {
		return errcode.Fallback(ErrPluginStart, fmt.Errorf("%w%s", err, tail))
	}
	var rpcErr *sdk.RPCError
	if how, ok := pluginproc.FailedByItself(cmd.ProcessState); ok && !errors.As(err, &rpcErr) {
		in.logger.Debug("driver plugin start failed", "error", err)
		return fmt.Errorf("%w: the process %s while starting%s", ErrPluginStart, how, tail)
	}
	return errcode.Fallback(ErrPluginStart, fmt.Errorf("%w%s", err, tail))
}

// check verifies the executable before each launch attempt, so that a
// missing or non-executable plugin is named as such, and a plugin the
// operator installs or fixes later is picked up by the next attempt.
func (in *instance) check() error {
	err := checkExecutable(&in.p)
	if err != nil && in.p.Err != nil {
		return in.p.Err // the catalog's description says more
	}
	return err
}

// reattach connects to the plugin process a previous client left running,
// or returns nil (after stopping that process if it is stale).
func (in *instance) reattach(ctx context.Context, rec *pb.DriverPluginRecord) *sdk.DriverPlugin {
	ra := rec.GetReattach()
	lc := sdk.LaunchConfig{
		Name:         in.p.Name,
		Reattach:     &sdk.Reattach{Pid: int(ra.GetPid()), Network: ra.GetNetwork(), Address: ra.GetAddress()},
		Logger:       in.m.logger,
		StartTimeout: in.m.cfg.StartTimeout,
	}
	stale := rec.GetPath() != in.p.Path || !slices.Equal(rec.GetArgs(), in.p.Args) ||
		(in.p.Builtin && rec.GetBerthVersion() != in.m.cfg.BerthVersion)
	proc, err := sdk.LaunchDriver(ctx, lc)
	if err != nil {
		in.logger.Info("driver plugin of the previous run is gone; starting a new one", "pid", ra.GetPid(), "error", err)
		removeSocketDir(ownedSocketDir(in.p.Name, ra.GetAddress()))
		in.m.deleteRecord(in.p.Name)
		return nil
	}
	if stale || proc.Driver().Name() != in.p.Name {
		in.logger.Info("driver plugin of the previous run was started differently; replacing it",
			"pid", ra.GetPid(), "path", rec.GetPath(), "args", rec.GetArgs(), "berth_version", rec.GetBerthVersion())
		proc.Kill()
		removeSocketDir(ownedSocketDir(in.p.Name, ra.GetAddress()))
		in.m.deleteRecord(in.p.Name)
		return nil
	}
	in.logger.Info("reattached to the driver plugin of the previous run", "pid", ra.GetPid())
	return proc
}

// setup checks the plugin's name, validates and sets its config, reads its
// capabilities and recovers its persisted tasks.
func (in *instance) setup(ctx context.Context, proc *sdk.DriverPlugin) (*running, error) {
	c := proc.Driver()
	if c.Name() != in.p.Name {
		return nil, in.p.errorf(fmt.Errorf("%w: it calls itself %q; a plugin_dir executable must be named for the driver it serves",
			ErrPluginName, c.Name()))
	}
	schemas, err := c.ConfigSchema(ctx)
	if err != nil {
		return nil, in.p.errorf(errcode.Fallback(ErrPluginStart, err))
	}
	vals, err := sdk.ConfigSpec{Plugin: in.p.Name, Scope: sdk.ScopePlugin, Schema: schemas.GetPlugin()}.Validate(in.p.Config)
	if err != nil {
		return nil, in.p.errorf(err)
	}
	if err := c.SetConfig(ctx, &driverpb.PluginConfig{Values: vals.ConfigMap()}); err != nil {
		if !isConfigError(err) {
			err = errcode.Fallback(ErrPluginStart, err)
		}
		return nil, in.p.errorf(err)
	}
	caps, err := c.Capabilities(ctx)
	if err != nil {
		return nil, in.p.errorf(errcode.Fallback(ErrPluginStart, err))
	}
	info, err := c.PluginInfo(ctx)
	if err != nil {
		return nil, in.p.errorf(errcode.Fallback(ErrPluginStart, err))
	}
	if err := in.recoverTasks(ctx, c); err != nil {
		return nil, in.p.errorf(errcode.Fallback(ErrPluginStart, err))
	}
	return &running{gen: in.nextGen(), proc: proc, client: c, pid: proc.Pid(), version: info.GetVersion(),
		schemas: schemas, caps: caps}, nil
}

// recoverTasks hands every persisted task of this driver to the plugin.
// A task that is gone, or a handle the plugin rejects, is logged and left
// for its owner to destroy; only the plugin dying fails the launch.
func (in *instance) recoverTasks(ctx context.Context, c *sdk.DriverClient) error {
	handles, err := in.m.cfg.Store.TaskHandles()
	if err != nil {
		in.logger.Error("some task handles are unreadable; those tasks cannot be recovered", "error", err)
	}
	recovered := 0
	for _, h := range handles {
		if h.GetDriver() != in.p.Name {
			continue
		}
		id := h.GetHandle().GetConfig().GetId()
		err := c.RecoverTask(ctx, h.GetHandle())
		switch {
		case err == nil:
			recovered++
		case errors.Is(err, sdk.ErrPluginShutdown), ctx.Err() != nil:
			return fmt.Errorf("recovering task %q: %w", id, err)
		case errors.Is(err, sdk.ErrTaskNotFound):
			in.logger.Warn("task is gone and how it ended is unknown", "task_id", id, "error", err)
		default:
			in.logger.Error("could not recover task", "task_id", id, "error", err)
		}
	}
	if recovered > 0 {
		in.logger.Info("recovered tasks", "count", recovered)
	}
	return nil
}

// saveRecord persists how to reattach to proc after a client restart.
func (in *instance) saveRecord(proc *sdk.DriverPlugin, launchedAt time.Time) {
	ra, ok := proc.Reattach()
	if !ok {
		return
	}
	rec := &pb.DriverPluginRecord{
		Name: in.p.Name, Path: in.p.Path, Args: in.p.Args,
		Reattach:     &pb.PluginReattach{Pid: int64(ra.Pid), Network: ra.Network, Address: ra.Address},
		LaunchedAt:   launchedAt.UnixNano(),
		BerthVersion: in.m.cfg.BerthVersion,
	}
	if err := in.m.cfg.Store.PutDriverPlugin(rec); err != nil {
		in.logger.Warn("persisting driver plugin reattach record; a client restart will start a new plugin", "error", err)
	}
}
