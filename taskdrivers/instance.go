package taskdrivers

import (
	"context"
	"errors"
	"fmt"
	"sync"

	hclog "github.com/hashicorp/go-hclog"

	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/internal/pluginsup"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// running is one live plugin process of a driver.
type running = pluginsup.Running[*sdk.DriverPlugin, *live]

// live is what Driver calls use of a running plugin, read at its launch.
type live struct {
	client  *sdk.DriverClient
	version string
	schemas *driverpb.ConfigSchemas
	caps    *driverpb.DriverCapabilities
}

// instance is one driver of the catalog: what pluginsup needs to launch,
// set up and watch its plugin, and the DriverInfo that DriverInfos reads.
type instance struct {
	m      *Manager
	p      Plugin
	sup    *pluginsup.Instance[*sdk.DriverPlugin, *live]
	logger hclog.Logger

	mu   sync.Mutex
	info *pb.DriverInfo
}

var (
	_ pluginsup.Plugin[*sdk.DriverPlugin, *live]   = (*instance)(nil)
	_ pluginsup.Observer[*sdk.DriverPlugin, *live] = (*instance)(nil)
)

func newInstance(m *Manager, p Plugin) (*instance, error) {
	in := &instance{m: m, p: p}
	in.info = in.baseInfo()
	in.info.HealthDescription = "starting"
	sup, err := m.sup.Add(pluginsup.Spec[*sdk.DriverPlugin, *live]{
		Name: p.Name, Path: p.Path, Args: p.Args, Builtin: p.Builtin, Err: p.Err,
		Wrap:   func(err error) error { return noun.Wrap(in.p, err) },
		Plugin: in, Observer: in,
	})
	if err != nil {
		return nil, err
	}
	in.sup, in.logger = sup, sup.Logger()
	return in, nil
}

// supervisorErrors are the manager's answers to pluginsup.
var supervisorErrors = pluginsup.Errors{
	Fatal:       isConfigError,
	Unavailable: unavailable,
}

// unavailable is the error of a call that finds no plugin running: the
// last failure's code when it has one (errcode.Fallback).
func unavailable(o pluginsup.Outage) error {
	switch {
	case o.Waited != nil:
		return fmt.Errorf("waiting for driver %q (%s): %w", o.Name, o.Reason, o.Waited)
	case o.LastErr != nil:
		return errcode.Fallback(ErrDriverUnavailable, o.LastErr)
	default:
		return fmt.Errorf("%w: driver %q: %s", ErrDriverUnavailable, o.Name, o.Reason)
	}
}

// acquire returns the running plugin (pluginsup.Instance.Acquire), once it
// destroyed the tasks earlier plugins died starting. Setup destroys them;
// this catches an ID recorded while the plugin was in Setup.
func (in *instance) acquire(ctx context.Context, wait bool) (*running, error) {
	for {
		r, err := in.sup.Acquire(ctx, wait)
		if err != nil {
			return nil, err
		}
		err = in.destroyPending(ctx, r.Val.client, r)
		switch {
		case err == nil:
			return r, nil
		case errors.Is(err, sdk.ErrPluginShutdown) && ctx.Err() == nil:
			in.gone(r)
			if !wait {
				return nil, err
			}
		default:
			return nil, err
		}
	}
}

// gone is how a caller reports that r failed a call with ErrPluginShutdown.
func (in *instance) gone(r *running) { in.sup.Gone(r) }

// Up implements pluginsup.Observer: the DriverInfo waits for the first
// fingerprint.
func (in *instance) Up(r *running, reattached bool) {
	in.logger.Info("driver plugin running", "pid", r.Pid, "reattached", reattached,
		"version", r.Val.version, "api_version", r.Val.client.APIVersion())
}

// Down implements pluginsup.Observer.
func (in *instance) Down(d pluginsup.Down) { in.setDown(d.Err, d.Reason) }

// Watch implements pluginsup.Plugin: it consumes the plugin's fingerprint
// stream until the plugin dies or ctx ends. A stream that fails while the
// plugin lives leaves the driver unhealthy and is opened again.
func (in *instance) Watch(ctx context.Context, r *running) error {
	for {
		var streamErr error
		for fp, err := range r.Val.client.Fingerprint(ctx) {
			if err != nil {
				streamErr = err
				break
			}
			in.applyFingerprint(r, fp)
			in.sup.Settled()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if r.Proc.Exited() {
			return fmt.Errorf("plugin process (pid %d) exited", r.Pid)
		}
		if errors.Is(streamErr, sdk.ErrPluginShutdown) {
			return fmt.Errorf("plugin (pid %d) is gone: %v", r.Pid, streamErr)
		}
		desc := "plugin ended its fingerprint stream"
		if streamErr != nil {
			desc = fmt.Sprintf("fingerprint failed: %v", streamErr)
		}
		in.setUnhealthy(desc)
		in.sup.Settled()
		in.logger.Warn("driver fingerprint stream ended; reopening it", "error", streamErr)
		if !backoff.Sleep(ctx.Done(), in.m.cfg.Backoff.Initial) {
			return ctx.Err()
		}
	}
}
