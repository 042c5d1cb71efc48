package taskdrivers

import (
	"context"
	"errors"
	"fmt"

	"berth.dev/berth/internal/pluginsup"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// Prepare implements pluginsup.Plugin: it checks the executable before
// each launch attempt, so that a missing or non-executable plugin is
// named as such, and a plugin the operator installs or fixes later is
// picked up by the next attempt.
func (in *instance) Prepare() error {
	err := noun.CheckExecutable(in.p)
	if err != nil && in.p.Err != nil {
		return in.p.Err // the catalog's description says more
	}
	return err
}

// Launch implements pluginsup.Plugin.
func (in *instance) Launch(ctx context.Context, cfg sdk.LaunchConfig) (*sdk.DriverPlugin, error) {
	return sdk.LaunchDriver(ctx, cfg)
}

// Setup implements pluginsup.Plugin: it checks the plugin's name,
// validates and sets its config, reads its capabilities and recovers its
// persisted tasks.
func (in *instance) Setup(ctx context.Context, proc *sdk.DriverPlugin) (*live, error) {
	c := proc.Driver()
	if c.Name() != in.p.Name {
		return nil, noun.Wrap(in.p, fmt.Errorf("%w: it calls itself %q; a plugin_dir executable must be named for the driver it serves",
			ErrPluginName, c.Name()))
	}
	schemas, err := c.ConfigSchema(ctx)
	if err != nil {
		return nil, noun.Wrap(in.p, errcode.Fallback(ErrPluginStart, err))
	}
	vals, err := sdk.ConfigSpec{Plugin: in.p.Name, Scope: sdk.ScopePlugin, Schema: schemas.GetPlugin()}.Validate(in.p.Config)
	if err != nil {
		return nil, noun.Wrap(in.p, err)
	}
	if err := c.SetConfig(ctx, &driverpb.PluginConfig{Values: vals.ConfigMap()}); err != nil {
		if !isConfigError(err) {
			err = errcode.Fallback(ErrPluginStart, err)
		}
		return nil, noun.Wrap(in.p, err)
	}
	caps, err := c.Capabilities(ctx)
	if err != nil {
		return nil, noun.Wrap(in.p, errcode.Fallback(ErrPluginStart, err))
	}
	info, err := c.PluginInfo(ctx)
	if err != nil {
		return nil, noun.Wrap(in.p, errcode.Fallback(ErrPluginStart, err))
	}
	if err := in.destroyPending(ctx, c, nil); err != nil {
		return nil, noun.Wrap(in.p, errcode.Fallback(ErrPluginStart, err))
	}
	if err := in.recoverTasks(ctx, c); err != nil {
		return nil, noun.Wrap(in.p, errcode.Fallback(ErrPluginStart, err))
	}
	return &live{client: c, version: info.GetVersion(), schemas: schemas, caps: caps}, nil
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

// pluginRecords keeps pluginsup's records in the Store's driver_plugins.
type pluginRecords struct{ PluginStore }

var _ pluginsup.Records = pluginRecords{}

func (s pluginRecords) PutRecord(name string, r pluginsup.Record) error {
	return s.PutDriverPlugin(&pb.DriverPluginRecord{
		Name: name, Path: r.Path, Args: r.Args,
		Reattach:     pluginsup.ReattachToPB(r.Reattach),
		LaunchedAt:   r.LaunchedAt.UnixNano(),
		BerthVersion: r.BerthVersion,
	})
}

func (s pluginRecords) DeleteRecord(name string) error { return s.DeleteDriverPlugin(name) }
