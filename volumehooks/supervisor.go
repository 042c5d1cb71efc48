package volumehooks

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/runhooks"

	hclog "github.com/hashicorp/go-hclog"

	"berth.dev/berth/csi/registry"
	"berth.dev/berth/internal/durations"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

// Registry is what the supervisor needs of the node's dynamic CSI plugin
// registry; *registry.Registry (csi/registry) implements it.
type Registry interface {
	Register(reg *pb.CSIPluginRegistration) error
	SetHealth(allocID, pluginID string, healthy bool, description string) error
	Deregister(allocID, pluginID string) error
}

// Defaults of SupervisorConfig.
const (
	DefaultHealthInterval        = 30 * time.Second
	DefaultStartProbeInterval    = 25 * time.Millisecond
	DefaultMaxStartProbeInterval = time.Second
	DefaultCallTimeout           = 5 * time.Second
	// DefaultHealthTimeout is the health_timeout of a csi_plugin block
	// that has none (jobspec fills it in; a job from an older server may
	// lack it).
	DefaultHealthTimeout = 30 * time.Second
)

// CSI_ENDPOINT and the interpolation variables the supervisor gives a
// plugin task.
const (
	EnvEndpoint            = "CSI_ENDPOINT"
	VarMountDir            = "csi.mount_dir"
	VarStagePublishBaseDir = "csi.stage_publish_base_dir"
)

// SupervisorConfig configures the csi_plugin supervisor hooks of a client.
type SupervisorConfig struct {
	// DataDir is the client's data dir (required): plugin sockets go under
	// <DataDir>/csi/plugins/<alloc>-<task>/, staging and publish targets under
	// <DataDir>/csi/volumes/<plugin>/.
	DataDir string
	// Registry is the node's dynamic plugin registry (required).
	Registry Registry
	Logger   hclog.Logger
	// HealthInterval is the period of the health probe once a plugin has
	// become healthy (default 30s).
	HealthInterval time.Duration
	// StartProbeInterval is the wait after the first failed probe of a
	// starting plugin (default 25ms); it doubles after each failure up to
	// MaxStartProbeInterval (default 1s).
	StartProbeInterval, MaxStartProbeInterval time.Duration
	// CallTimeout bounds each Probe and GetPluginInfo (default 5s): on
	// Clock, and on the wall clock in the CSI client as a backstop.
	CallTimeout time.Duration
	// Now stamps task events (default: Clock's Now).
	Now func() time.Time
	// Clock times the supervisor's waits, health deadlines and call
	// deadlines (default: the wall clock), so tests drive them without
	// sleeping.
	Clock clock.Clock
	// Context ends every supervisor when it is done (the client shutting
	// down), without deregistering anything: the plugins keep running for
	// the next client to find. Default: never done.
	Context context.Context
}

func (c SupervisorConfig) withDefaults() SupervisorConfig {
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.HealthInterval <= 0 {
		c.HealthInterval = DefaultHealthInterval
	}
	if c.StartProbeInterval <= 0 {
		c.StartProbeInterval = DefaultStartProbeInterval
	}
	if c.MaxStartProbeInterval < c.StartProbeInterval {
		c.MaxStartProbeInterval = max(DefaultMaxStartProbeInterval, c.StartProbeInterval)
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Now == nil {
		c.Now = c.Clock.Now
	}
	if c.Context == nil {
		c.Context = context.Background()
	}
	return c
}

// NewCSIPluginSupervisor returns the factory of csi_plugin supervisor
// hooks, for allocrunner.Hooks.Task: a hook for each task with a
// csi_plugin block, nil for the others. See the package doc for what the
// hook does.
func NewCSIPluginSupervisor(cfg SupervisorConfig) func(runhooks.AllocInfo, *pb.Task) runhooks.Hook {
	cfg = cfg.withDefaults()
	return func(a runhooks.AllocInfo, t *pb.Task) runhooks.Hook {
		if t.GetCsiPlugin() == nil {
			return nil
		}
		return &supervisorHook{cfg: cfg, allocID: a.Alloc.GetId(), task: t.GetName(), blockID: t.GetCsiPlugin().GetId(), logger: cfg.Logger.Named("csi_plugin_supervisor").With(
			"alloc_id", a.Alloc.GetId(), "task", t.GetName(), "plugin_id", t.GetCsiPlugin().GetId())}
	}
}

// supervisorHook is the csi_plugin supervisor of one task.
type supervisorHook struct {
	cfg     SupervisorConfig
	logger  hclog.Logger
	allocID string
	task    string
	// blockID is the plugin ID of the task's csi_plugin block: torn down
	// even when no supervisor of this client registered it (an entry
	// restored after a client restart whose task is gone).
	blockID string

	mu sync.Mutex
	// prep is what the last prestart decided, for the next poststart.
	prep *prepared
	// sup is the running supervisor, nil when none runs; pluginID is
	// what it may have registered, for the teardown.
	sup      *supervisor
	pluginID string
}

var (
	_ runhooks.PrestartHook    = (*supervisorHook)(nil)
	_ runhooks.PoststartHook   = (*supervisorHook)(nil)
	_ runhooks.StopHook        = (*supervisorHook)(nil)
	_ runhooks.ExitedHook      = (*supervisorHook)(nil)
	_ runhooks.FinishedHook    = (*supervisorHook)(nil)
	_ runhooks.TaskDestroyHook = (*supervisorHook)(nil)
)

// prepared is a plugin task's layout, as its prestart built it.
type prepared struct {
	plugin *pb.CSIPluginConfig
	typ    pb.CSIPluginType
	// socket is the host path of the plugin's socket.
	socket string
	// stageDir is the staging/publish base as the plugin sees it.
	stageDir      string
	healthTimeout time.Duration
}

func (h *supervisorHook) Name() string { return "csi_plugin_supervisor" }

// pluginType turns a csi_plugin block's type into the registry's.
func pluginType(s string) (pb.CSIPluginType, bool) {
	switch s {
	case "controller":
		return pb.CSIPluginType_CSI_PLUGIN_TYPE_CONTROLLER, true
	case "node":
		return pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE, true
	case "monolith":
		return pb.CSIPluginType_CSI_PLUGIN_TYPE_MONOLITH, true
	}
	return pb.CSIPluginType_CSI_PLUGIN_TYPE_UNSPECIFIED, false
}

// checkBlock refuses what the job validation refuses, for a job that
// reached the client without it (an older server).
func checkBlock(task string, pc *pb.CSIPluginConfig) (pb.CSIPluginType, error) {
	typ, ok := pluginType(pc.GetType())
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: task %q: csi_plugin %s", ErrInvalidPluginBlock, task, fmt.Sprintf(format, args...))
	}
	switch id := pc.GetId(); {
	case id == "":
		return typ, bad("has no id")
	case strings.ContainsAny(id, "/\\\x00") || id == "." || id == "..":
		// The ID names a directory under the data dir.
		return typ, bad("id %q: not a name", id)
	case !ok:
		return typ, bad("type %q: want controller, node or monolith", pc.GetType())
	}
	for key, dir := range map[string]string{"mount_dir": pc.GetMountDir(), "stage_publish_base_dir": pc.GetStagePublishBaseDir()} {
		if !path.IsAbs(dir) || path.Clean(dir) != dir || dir == "/" {
			return typ, bad("%s %q: want an absolute, clean path other than /", key, dir)
		}
	}
	return typ, nil
}

// Prestart lays out the plugin's directories and tells the task where its
// socket and staging base are: mounts and task paths for an isolating
// driver, host paths for an unisolated one.
func (h *supervisorHook) Prestart(ctx context.Context, req *runhooks.PrestartRequest, resp *runhooks.PrestartResponse) error {
	if !filepath.IsAbs(h.cfg.DataDir) || h.cfg.Registry == nil {
		return runhooks.Unrecoverable(fmt.Errorf("%w: data dir %q (must be absolute), registry set: %t",
			ErrNotConfigured, h.cfg.DataDir, h.cfg.Registry != nil))
	}
	plugin := req.Task.GetCsiPlugin()
	typ, err := checkBlock(req.Task.GetName(), plugin)
	if err != nil {
		return runhooks.Unrecoverable(err)
	}
	allocID := req.Alloc.GetId()
	pluginDir := PluginDir(h.cfg.DataDir, allocID, req.Task.GetName())
	socket := PluginSocket(h.cfg.DataDir, allocID, req.Task.GetName())
	hostStage := StagePublishDir(h.cfg.DataDir, plugin.GetId())
	if err := checkSocketPath("the host", socket); err != nil {
		// No retry helps: the task fails at once, naming the way out.
		return runhooks.Unrecoverable(fmt.Errorf("csi plugin %q of task %q: %w; the client's data_dir %q is %d bytes: "+
			"give the client a data_dir of at most %d bytes (or the task a shorter name)",
			plugin.GetId(), req.Task.GetName(), err, h.cfg.DataDir, len(h.cfg.DataDir), maxDataDir(h.cfg.DataDir, socket)))
	}
	isolated := false
	if req.Driver != nil {
		if isolated, err = req.Driver.HonoursMounts(ctx); err != nil {
			return fmt.Errorf("csi plugin %q of task %q: asking driver %q whether it honours mounts: %w",
				plugin.GetId(), req.Task.GetName(), req.Task.GetDriver(), err)
		}
	}
	taskSocket := path.Join(plugin.GetMountDir(), SocketName)
	if isolated {
		if err := checkSocketPath("the task's", taskSocket); err != nil {
			return runhooks.Unrecoverable(fmt.Errorf("csi plugin %q of task %q: %w; give csi_plugin a mount_dir of at most %d bytes",
				plugin.GetId(), req.Task.GetName(), err, MaxSocketPath-len("/"+SocketName)))
		}
	}
	for _, dir := range []string{pluginDir, hostStage} {
		// 0755: a plugin's own tools and a task running as another user
		// must reach the socket and the targets under these dirs.
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("csi plugin %q of task %q: %w", plugin.GetId(), req.Task.GetName(), err)
		}
	}
	if !req.Recovered {
		// A socket left by the previous attempt would answer nothing and
		// make some plugins fail to listen (address in use). A recovered
		// task's socket is its live one.
		if err := os.Remove(socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("csi plugin %q of task %q: removing the previous socket: %w", plugin.GetId(), req.Task.GetName(), err)
		}
	}
	p := &prepared{plugin: plugin, typ: typ, socket: socket, stageDir: hostStage,
		healthTimeout: durations.FromMs(plugin.GetHealthTimeoutMs())}
	if p.healthTimeout <= 0 {
		p.healthTimeout = DefaultHealthTimeout
	}
	if isolated {
		p.stageDir = plugin.GetStagePublishBaseDir()
		resp.Mounts = []*driverpb.Mount{
			{HostPath: pluginDir, TaskPath: plugin.GetMountDir(), Propagation: driverpb.MountPropagation_MOUNT_PROPAGATION_BIDIRECTIONAL},
			// Bidirectional too: the plugin mounts volumes under it, and
			// the host must see them to bind them into consumer tasks.
			{HostPath: hostStage, TaskPath: plugin.GetStagePublishBaseDir(), Propagation: driverpb.MountPropagation_MOUNT_PROPAGATION_BIDIRECTIONAL},
		}
		resp.Env = map[string]string{EnvEndpoint: "unix://" + taskSocket}
		resp.Vars = map[string]string{VarMountDir: plugin.GetMountDir(), VarStagePublishBaseDir: plugin.GetStagePublishBaseDir()}
	} else {
		resp.Env = map[string]string{EnvEndpoint: "unix://" + socket}
		resp.Vars = map[string]string{VarMountDir: pluginDir, VarStagePublishBaseDir: hostStage}
	}
	h.mu.Lock()
	h.prep = p
	h.mu.Unlock()
	return nil
}

// Poststart starts the supervisor of the attempt that started (or was
// recovered after a client restart).
func (h *supervisorHook) Poststart(ctx context.Context, req *runhooks.PoststartRequest) error {
	h.mu.Lock()
	p := h.prep
	h.mu.Unlock()
	if p == nil {
		return fmt.Errorf("csi plugin %q of task %q in alloc %s: poststart without a prestart", h.blockID, req.Task.GetName(), h.allocID)
	}
	if err := h.stopSupervisor(ctx); err != nil {
		return err
	}
	s := newSupervisor(h.cfg, h.logger.With("task_id", req.TaskID), req.TaskInfo, req.TaskID, req.Recovered, p)
	h.mu.Lock()
	h.sup, h.pluginID = s, p.plugin.GetId()
	h.mu.Unlock()
	go s.run()
	return nil
}

// Stop runs before the task is stopped. Killed (for good), the plugin is
// deregistered: volumes must not be sent to a plugin on its way out.
// Stopped to restart, its entry stays, unhealthy, until the next attempt
// registers it again (park): while the alloc lives its plugin ID is the
// task plugin's on this node, and a storage adapter of the same ID must
// not be reported in its place for the restart's few seconds (a
// different backend: README, "never falls back").
func (h *supervisorHook) Stop(ctx context.Context, req *runhooks.StopRequest) error {
	if req != nil && req.Restart {
		return h.park(ctx, "restarting: "+req.Reason)
	}
	return h.teardown(ctx, h.blockID)
}

// Exited marks the plugin unhealthy after its task exited: the restart
// policy decides next, and the entry stays until the next attempt
// registers it or the task is dead for good (Finished).
func (h *supervisorHook) Exited(ctx context.Context, _ *runhooks.ExitedRequest) error {
	err := h.park(ctx, "the plugin task exited")
	// Nothing serves the socket any more: a socket on the host means a
	// plugin is there. (The next attempt's prestart would remove it too.)
	h.removeIfThere(PluginSocket(h.cfg.DataDir, h.allocID, h.task))
	return err
}

// Finished deregisters the plugin once its task is dead for good (killed,
// or ended by its restart policy): a storage adapter of the same ID serves
// it on the node again.
func (h *supervisorHook) Finished(ctx context.Context, _ *runhooks.FinishedRequest) error {
	return h.teardown(ctx, h.blockID)
}

// Destroy deregisters whatever is left when the alloc is destroyed.
func (h *supervisorHook) Destroy(ctx context.Context, req *runhooks.TaskDestroyRequest) error {
	// A task that ran no supervisor in this client (it died before the
	// client restarted) may still have an entry from an earlier run.
	err := h.teardown(ctx, h.blockID)
	// The plugin directory goes with the alloc. The staging/publish base is
	// the plugin's, not the alloc's: a newer alloc of the plugin uses it.
	h.removeIfThere(PluginSocket(h.cfg.DataDir, h.allocID, h.task))
	h.removeIfThere(PluginDir(h.cfg.DataDir, h.allocID, h.task))
	return err
}

// removeIfThere removes a file or an empty directory of the plugin's. It
// is not recursive: a directory still holding something (or still a mount
// point) is left, and logged, rather than emptied through a mount.
func (h *supervisorHook) removeIfThere(p string) {
	if !filepath.IsAbs(h.cfg.DataDir) {
		return
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		h.logger.Warn("leaving the csi plugin's file in place", "path", p, "error", err)
	}
}

// park stops the supervisor and marks the plugin's registry entries
// unhealthy, saying why, without removing them. An entry that is not
// there (the plugin never became ready) is left so.
func (h *supervisorHook) park(ctx context.Context, why string) error {
	if err := h.stopSupervisor(ctx); err != nil {
		return err
	}
	h.mu.Lock()
	ids := []string{h.pluginID, h.blockID}
	h.mu.Unlock()
	var errs []error
	seen := map[string]bool{"": true}
	for _, id := range ids {
		if seen[id] || h.cfg.Registry == nil {
			continue
		}
		seen[id] = true
		err := h.cfg.Registry.SetHealth(h.allocID, id, false, why)
		if err != nil && !errors.Is(err, registry.ErrNotRegistered) {
			errs = append(errs, fmt.Errorf("csi plugin %q of alloc %s: %w", id, h.allocID, err))
		}
	}
	return errors.Join(errs...)
}

// teardown stops the supervisor and removes the plugin's registry entries
// (the one the supervisor may have made, and those of also).
func (h *supervisorHook) teardown(ctx context.Context, also ...string) error {
	if err := h.stopSupervisor(ctx); err != nil {
		return err
	}
	h.mu.Lock()
	ids := append([]string{h.pluginID}, also...)
	h.mu.Unlock()
	var errs []error
	seen := map[string]bool{"": true}
	for _, id := range ids {
		if seen[id] || h.cfg.Registry == nil {
			continue
		}
		seen[id] = true
		if err := h.cfg.Registry.Deregister(h.allocID, id); err != nil {
			errs = append(errs, fmt.Errorf("csi plugin %q of alloc %s: %w", id, h.allocID, err))
		}
	}
	return errors.Join(errs...)
}

// stopSupervisor stops the running supervisor and waits for it; its calls
// to the plugin end with it, so a hung plugin does not hold it.
func (h *supervisorHook) stopSupervisor(ctx context.Context) error {
	h.mu.Lock()
	s := h.sup
	h.sup = nil
	h.mu.Unlock()
	if s == nil {
		return nil
	}
	s.cancel()
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("csi plugin %q of alloc %s: waiting for its supervisor to stop: %w", s.pluginID(), h.allocID, ctx.Err())
	}
}
