package csiadapters

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	plugin "github.com/hashicorp/go-plugin"

	"berth.dev/berth/internal/pluginproc"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
)

// socketKind names adapters' socket directories (pluginproc.NewSocketDir).
const socketKind = "csi"

func isConfigError(err error) bool { return errors.Is(err, ErrInvalidConfig) }

// DataDir is the directory the adapter name owns under a client data dir.
func DataDir(clientDataDir, name string) string {
	return filepath.Join(clientDataDir, "csi", "adapters", name)
}

// env is the environment an adapter process gets: go-plugin's socket dir,
// PATH (a CSI plugin runs mount tools), and sdk.StorageEnv's variables.
func (in *instance) env(sockDir string) []string {
	cfg := in.a.Config
	if len(cfg) == 0 {
		cfg = []byte("{}")
	}
	return []string{
		plugin.EnvUnixSocketDir + "=" + sockDir,
		"PATH=" + os.Getenv("PATH"),
		sdk.EnvStorageConfig + "=" + string(cfg),
		sdk.EnvStorageNodeID + "=" + in.m.cfg.NodeID,
		sdk.EnvStorageNodeName + "=" + in.m.cfg.NodeName,
		sdk.EnvStorageDataDir + "=" + DataDir(in.m.cfg.DataDir, in.a.Name),
	}
}

// configDigest identifies what the process was given besides its command
// line, so that a process started with another config is replaced rather
// than reattached.
func (in *instance) configDigest() string {
	h := sha256.New()
	for _, kv := range in.env("")[2:] {
		h.Write([]byte(kv))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// launch brings up the adapter: reattached from rec when that works, else
// a new process. On error no process it started is left running.
func (in *instance) launch(ctx context.Context, rec *pb.StorageAdapterRecord) (r *running, reattached bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, in.m.cfg.StartTimeout)
	defer cancel()
	launchedAt := time.Now()
	var proc *sdk.StoragePlugin
	var sockDir string
	if rec != nil {
		if proc = in.reattach(ctx, rec); proc != nil {
			launchedAt = time.Unix(0, rec.GetLaunchedAt())
			sockDir = pluginproc.OwnedSocketDir(socketKind, in.a.Name, rec.GetReattach().GetAddress())
			reattached = true
		}
	}
	if proc == nil {
		if err := in.check(); err != nil {
			return nil, false, err
		}
		if err := os.MkdirAll(DataDir(in.m.cfg.DataDir, in.a.Name), 0o700); err != nil {
			return nil, false, in.a.errorf(errcode.Fallback(ErrAdapterStart, fmt.Errorf("adapter data dir: %w", err)))
		}
		sockDir, err = pluginproc.NewSocketDir(socketKind, in.a.Name)
		if err != nil {
			return nil, false, in.a.errorf(errcode.Fallback(ErrAdapterStart, fmt.Errorf("socket directory: %w", err)))
		}
		stderr := &pluginproc.TailWriter{}
		cmd := exec.Command(in.a.Path, in.a.Args...)
		cmd.Env = in.env(sockDir)
		proc, err = sdk.LaunchStorageAdapter(ctx, sdk.LaunchConfig{
			Name:         in.a.Name,
			Cmd:          cmd,
			Logger:       in.m.logger,
			StartTimeout: in.m.cfg.StartTimeout,
			Stderr:       stderr,
		})
		if err != nil {
			pluginproc.RemoveSocketDir(sockDir)
			return nil, false, in.a.errorf(startError(ctx, cmd, stderr, err))
		}
	}
	if name := proc.Adapter().Name(); name != in.a.Name {
		proc.Kill()
		pluginproc.RemoveSocketDir(sockDir)
		in.m.deleteRecord(in.a.Name)
		return nil, false, in.a.errorf(fmt.Errorf("%w: it calls itself %q; a plugin_dir/csi executable must be named for the adapter it serves",
			ErrAdapterName, name))
	}
	r = &running{gen: in.nextGen(), proc: proc, conn: proc.Adapter().Conn(), pid: proc.Pid(), sockDir: sockDir, startedAt: time.Now()}
	in.saveRecord(proc, launchedAt)
	return r, reattached, nil
}

// startError describes a failed launch, with the process's last stderr
// lines, and by its exit when it failed by itself before the handshake.
// The exit is only read while ctx has not ended (see sdk.LaunchDriver).
func startError(ctx context.Context, cmd *exec.Cmd, stderr *pluginproc.TailWriter, err error) error {
	tail := stderr.Summary()
	if ctx.Err() == nil {
		if how, ok := pluginproc.FailedByItself(cmd.ProcessState); ok {
			return fmt.Errorf("%w: the process %s while starting%s", ErrAdapterStart, how, tail)
		}
	}
	return errcode.Fallback(ErrAdapterStart, fmt.Errorf("%w%s", err, tail))
}

// check verifies the executable before each launch attempt, so that an
// adapter the operator installs or fixes later is picked up.
func (in *instance) check() error {
	err := checkExecutable(&in.a)
	if err != nil && in.a.Err != nil {
		return in.a.Err // the catalog's description says more
	}
	return err
}

// reattach connects to the process a previous client left running, or
// returns nil (after stopping that process if it was started differently).
func (in *instance) reattach(ctx context.Context, rec *pb.StorageAdapterRecord) *sdk.StoragePlugin {
	ra := rec.GetReattach()
	stale := rec.GetPath() != in.a.Path || !slices.Equal(rec.GetArgs(), in.a.Args) ||
		rec.GetConfigDigest() != in.configDigest() ||
		(in.a.Builtin && rec.GetBerthVersion() != in.m.cfg.BerthVersion)
	proc, err := sdk.LaunchStorageAdapter(ctx, sdk.LaunchConfig{
		Name:         in.a.Name,
		Reattach:     &sdk.Reattach{Pid: int(ra.GetPid()), Network: ra.GetNetwork(), Address: ra.GetAddress()},
		Logger:       in.m.logger,
		StartTimeout: in.m.cfg.StartTimeout,
	})
	if err != nil {
		in.logger.Info("storage adapter of the previous run is gone; starting a new one", "pid", ra.GetPid(), "error", err)
		pluginproc.RemoveSocketDir(pluginproc.OwnedSocketDir(socketKind, in.a.Name, ra.GetAddress()))
		in.m.deleteRecord(in.a.Name)
		return nil
	}
	if stale {
		in.logger.Info("storage adapter of the previous run was started differently; replacing it",
			"pid", ra.GetPid(), "path", rec.GetPath(), "args", rec.GetArgs(), "berth_version", rec.GetBerthVersion())
		proc.Kill()
		pluginproc.RemoveSocketDir(pluginproc.OwnedSocketDir(socketKind, in.a.Name, ra.GetAddress()))
		in.m.deleteRecord(in.a.Name)
		return nil
	}
	in.logger.Info("reattached to the storage adapter of the previous run", "pid", ra.GetPid())
	return proc
}

// stopStale stops the process of a record whose adapter left the catalog.
func stopStale(m *Manager, rec *pb.StorageAdapterRecord) {
	ra := rec.GetReattach()
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.StartTimeout)
	defer cancel()
	proc, err := sdk.LaunchStorageAdapter(ctx, sdk.LaunchConfig{
		Name:     rec.GetName(),
		Reattach: &sdk.Reattach{Pid: int(ra.GetPid()), Network: ra.GetNetwork(), Address: ra.GetAddress()},
		Logger:   m.logger,
	})
	if err == nil {
		proc.Kill()
	}
	pluginproc.RemoveSocketDir(pluginproc.OwnedSocketDir(socketKind, rec.GetName(), ra.GetAddress()))
	m.deleteRecord(rec.GetName())
}

// saveRecord persists how to reattach to proc after a client restart.
func (in *instance) saveRecord(proc *sdk.StoragePlugin, launchedAt time.Time) {
	ra, ok := proc.Reattach()
	if !ok {
		return
	}
	rec := &pb.StorageAdapterRecord{
		Name: in.a.Name, Path: in.a.Path, Args: in.a.Args,
		ConfigDigest: in.configDigest(),
		Reattach:     &pb.PluginReattach{Pid: int64(ra.Pid), Network: ra.Network, Address: ra.Address},
		LaunchedAt:   launchedAt.UnixNano(),
		BerthVersion: in.m.cfg.BerthVersion,
	}
	if err := in.m.cfg.Store.PutStorageAdapter(rec); err != nil {
		in.logger.Warn("persisting storage adapter reattach record; a client restart will start a new adapter", "error", err)
	}
}

// stop shuts r's process down and removes its socket directory.
func (r *running) stop() {
	r.proc.Kill()
	pluginproc.RemoveSocketDir(r.sockDir)
}
