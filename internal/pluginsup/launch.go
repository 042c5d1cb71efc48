package pluginsup

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"time"

	plugin "github.com/hashicorp/go-plugin"

	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/internal/pluginproc"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/sdk"
)

// launch brings up the plugin: reattached from rec when that works, else a
// new process; then Setup. On error no process it started is left
// running.
func (in *Instance[P, T]) launch(ctx context.Context, rec *Record) (r *Running[P, T], reattached bool, err error) {
	cfg := in.s.cfg
	ctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	launchedAt := time.Now()
	var proc P
	var sockDir string
	if rec != nil {
		proc, reattached = in.reattach(ctx, rec)
		if reattached {
			launchedAt = rec.LaunchedAt
			sockDir = pluginproc.OwnedSocketDir(cfg.Kind, in.spec.Name, rec.Reattach.Address)
		}
	}
	if !reattached {
		proc, sockDir, err = in.start(ctx)
		if err != nil {
			return nil, false, err
		}
	}
	val, err := in.spec.Plugin.Setup(ctx, proc)
	if err != nil {
		proc.Kill()
		pluginproc.RemoveSocketDir(sockDir)
		in.deleteRecord()
		return nil, false, err
	}
	r = &Running[P, T]{Proc: proc, Val: val, Pid: proc.Pid(), sockDir: sockDir, startedAt: time.Now(), gone: make(chan struct{})}
	r.unsaved = in.saveRecord(proc, launchedAt)
	return r, reattached, nil
}

// start launches a new process in a socket directory of its own.
func (in *Instance[P, T]) start(ctx context.Context) (proc P, sockDir string, err error) {
	cfg := in.s.cfg
	if err := in.spec.Plugin.Prepare(); err != nil {
		return proc, "", err
	}
	sockDir, err = pluginproc.NewSocketDir(cfg.Kind, in.spec.Name)
	if err != nil {
		return proc, "", in.spec.Wrap(errcode.Fallback(ErrStart, fmt.Errorf("socket directory: %w", err)))
	}
	// One per attempt: the process of an attempt abandoned when ctx
	// ended may still be writing while the next attempt starts.
	stderr := &pluginproc.TailWriter{}
	cmd := exec.Command(in.spec.Path, in.spec.Args...)
	cmd.Env = append([]string{plugin.EnvUnixSocketDir + "=" + sockDir}, in.spec.Env...)
	proc, err = in.spec.Plugin.Launch(ctx, sdk.LaunchConfig{
		Name:         in.spec.Name,
		Cmd:          cmd,
		Logger:       cfg.Logger,
		StartTimeout: cfg.StartTimeout,
		Stderr:       stderr,
	})
	if err != nil {
		pluginproc.RemoveSocketDir(sockDir)
		return proc, "", in.spec.Wrap(in.startError(ctx, cmd, stderr, err))
	}
	return proc, sockDir, nil
}

// startError describes a failed launch of cmd, with the last lines the
// process wrote to stderr. A process that failed by itself before the
// handshake is described by its exit rather than by go-plugin's generic
// handshake diagnostics, which go to the log. A failure after the
// handshake (an *sdk.RPCError, e.g. no common API version) is the error
// itself: the process then exited because the launcher stopped it.
//
// The exit is only read while ctx has not ended: the launcher has then
// reaped the process. Once ctx ends it returns at once and leaves the
// process to be stopped in the background, where go-plugin's cmd.Wait
// still writes cmd.ProcessState.
func (in *Instance[P, T]) startError(ctx context.Context, cmd *exec.Cmd, stderr *pluginproc.TailWriter, err error) error {
	start := ErrStart
	tail := stderr.Summary()
	if ctx.Err() != nil {
		return errcode.Fallback(start, fmt.Errorf("%w%s", err, tail))
	}
	var rpcErr *sdk.RPCError
	if how, ok := pluginproc.FailedByItself(cmd.ProcessState); ok && !errors.As(err, &rpcErr) {
		in.logger.Debug(in.s.cfg.Noun+" start failed", "error", err)
		return fmt.Errorf("%w: the process %s while starting%s", start, how, tail)
	}
	return errcode.Fallback(start, fmt.Errorf("%w%s", err, tail))
}

// reattach connects to the process a previous client left running, or
// reports false (after stopping that process if it was started
// differently, and deleting its record).
func (in *Instance[P, T]) reattach(ctx context.Context, rec *Record) (P, bool) {
	cfg, spec := in.s.cfg, in.spec
	ra := rec.Reattach
	stale := rec.Path != spec.Path || !slices.Equal(rec.Args, spec.Args) || rec.ConfigDigest != spec.ConfigDigest ||
		(spec.Builtin && rec.BerthVersion != cfg.BerthVersion)
	proc, err := spec.Plugin.Launch(ctx, sdk.LaunchConfig{
		Name:         spec.Name,
		Reattach:     &ra,
		Logger:       cfg.Logger,
		StartTimeout: cfg.StartTimeout,
	})
	forget := func() {
		pluginproc.RemoveSocketDir(pluginproc.OwnedSocketDir(cfg.Kind, spec.Name, ra.Address))
		in.deleteRecord()
	}
	if err != nil {
		in.logger.Info(cfg.Noun+" of the previous run is gone; starting a new one", "pid", ra.Pid, "error", err)
		forget()
		var none P
		return none, false
	}
	if stale {
		in.logger.Info(cfg.Noun+" of the previous run was started differently; replacing it",
			"pid", ra.Pid, "path", rec.Path, "args", rec.Args, "berth_version", rec.BerthVersion)
		proc.Kill()
		forget()
		var none P
		return none, false
	}
	in.logger.Info("reattached to the "+cfg.Noun+" of the previous run", "pid", ra.Pid)
	return proc, true
}

// saveRecord persists how to reattach to proc after a client restart. It
// returns the record when the write failed (a full disk): watch writes it
// again until it is written (retryRecord).
func (in *Instance[P, T]) saveRecord(proc P, launchedAt time.Time) *Record {
	ra, ok := proc.Reattach()
	if !ok {
		return nil
	}
	cfg := in.s.cfg
	rec := Record{
		Path: in.spec.Path, Args: in.spec.Args, ConfigDigest: in.spec.ConfigDigest,
		Reattach: ra, LaunchedAt: launchedAt, BerthVersion: cfg.BerthVersion,
	}
	if err := cfg.Records.PutRecord(in.spec.Name, rec); err != nil {
		in.logger.Warn("persisting "+cfg.Noun+" reattach record; retrying until it is written", "pid", ra.Pid, "error", err)
		return &rec
	}
	return nil
}

// Backoff of retryRecord's writes.
const (
	recordRetryStart = 100 * time.Millisecond
	recordRetryMax   = 10 * time.Second
)

// retryRecord writes rec again, backing off from recordRetryStart to
// recordRetryMax, until it is written or ctx ends (the process stopped,
// or the supervisor did). Without it a restarted client would start a
// second process while this one, and the tasks it runs, keep running
// unknown.
func (in *Instance[P, T]) retryRecord(ctx context.Context, rec Record) {
	wait := backoff.Backoff{Initial: recordRetryStart, Max: recordRetryMax}
	for attempt := 1; ; attempt++ {
		if !backoff.Sleep(ctx.Done(), wait.Delay(attempt)) {
			return
		}
		err := in.s.cfg.Records.PutRecord(in.spec.Name, rec)
		if err == nil {
			in.logger.Info(in.s.cfg.Noun+" reattach record written", "pid", rec.Reattach.Pid)
			return
		}
		in.logger.Debug("persisting "+in.s.cfg.Noun+" reattach record still fails; retrying", "retry_in", wait.Delay(attempt+1), "error", err)
	}
}

func (in *Instance[P, T]) deleteRecord() {
	if err := in.s.cfg.Records.DeleteRecord(in.spec.Name); err != nil {
		in.logger.Warn("deleting "+in.s.cfg.Noun+" reattach record", "error", err)
	}
}
