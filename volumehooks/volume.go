package volumehooks

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	hclog "github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"

	"berth.dev/berth/csi/volumemanager"
	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/internal/rules"
	"berth.dev/berth/internal/runhooks"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

var (
	// ErrNodePluginUnavailable is returned by the volume hook's prerun
	// when the volume's node plugin is not running and healthy on this
	// node within VolumeConfig.PluginWait.
	ErrNodePluginUnavailable = errcode.New(codes.FailedPrecondition, "the volume's csi node plugin is not available on this node")
	// ErrClaimReleased is returned by the volume hook's prerun when the
	// alloc's claim is already being released (the alloc is stopping).
	ErrClaimReleased = errcode.New(codes.FailedPrecondition, "the alloc's claim on the volume is being released")
)

// Volumes is what the hooks need of the node volume manager;
// *volumemanager.Manager implements it.
type Volumes interface {
	Publish(ctx context.Context, req volumemanager.PublishRequest) (string, error)
	Unpublish(ctx context.Context, user, volumeID string, progress volumemanager.Progress) error
	Uses() []volumemanager.Use
	Sweep(ctx context.Context, keep func(volumemanager.Use) bool) error
	// Expand makes a node expansion of a volume the node holds
	// (volume_expand.go).
	Expand(ctx context.Context, volumeID, pluginID string, req *csipb.NodeExpandVolumeRequest) (volumemanager.ExpandResult, error)
}

var _ Volumes = (*volumemanager.Manager)(nil)

// Defaults of VolumeConfig.
const (
	DefaultPluginWait      = time.Minute
	DefaultVolumeTimeout   = 10 * time.Minute
	DefaultTeardownWait    = 30 * time.Second
	DefaultRetryStart      = 100 * time.Millisecond
	DefaultRetryMax        = 10 * time.Second
	DefaultTeardownRetry   = time.Second
	DefaultTeardownRetryMx = time.Minute
	DefaultTeardownAttempt = 2 * time.Minute
	DefaultOlderServerWait = 10 * time.Minute
)

// VolumeConfig configures the volume hooks of a client.
type VolumeConfig struct {
	// DataDir is the client's data dir; NodeID the node's ID (both
	// required).
	DataDir string
	NodeID  string
	Claims  Claims
	Volumes Volumes
	// Plugins finds the volumes' node plugins, for the bounded wait
	// before publishing.
	Plugins volumemanager.Plugins
	Reports *Reporter
	Logger  hclog.Logger
	// PluginWait bounds the wait for a volume's node plugin (default 1m).
	PluginWait time.Duration
	// Timeout bounds each alloc hook call (default 10m: a claim may wait
	// for its controller publish).
	Timeout time.Duration
	// TeardownWait is how long Postrun waits for a teardown; one not done
	// by then goes on in the background (default 30s).
	TeardownWait time.Duration
	// RetryStart and RetryMax space the retries of a ClientClaim the
	// servers did not answer (defaults 100ms, 10s).
	RetryStart, RetryMax time.Duration
	// TeardownRetry and TeardownRetryMax space the tries of a teardown
	// that failed (defaults 1s, 1m; doubled per try, jittered by ±20%): a
	// plugin's final answer may change once an operator fixes what it
	// complained of, or its disk has room again, and a claim is never left
	// releasing for good.
	TeardownRetry, TeardownRetryMax time.Duration
	// OlderServerWait spaces the asks of TearDownUnrun answered by a
	// server that does not list an alloc's claims (default 10m): until
	// the servers are upgraded, asking sooner learns nothing.
	OlderServerWait time.Duration
	// Jitter returns a number in [0, 1) for the teardown backoff's jitter
	// (default rand.Float64).
	Jitter func() float64
	// TeardownAttempt bounds one try of a teardown (default 2m), its
	// uncertain errors retried within it: a node plugin that is gone, or
	// hangs, is shown on the claim and in task events when it runs out,
	// rather than waited for in silence.
	TeardownAttempt time.Duration
	// Context ends the background teardowns (the client shutting down);
	// what they did not finish is recorded for the next start.
	Context context.Context
	Now     func() time.Time
}

func (c VolumeConfig) withDefaults() VolumeConfig {
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.PluginWait <= 0 {
		c.PluginWait = DefaultPluginWait
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultVolumeTimeout
	}
	if c.TeardownWait <= 0 {
		c.TeardownWait = DefaultTeardownWait
	}
	if c.RetryStart <= 0 {
		c.RetryStart = DefaultRetryStart
	}
	if c.RetryMax < c.RetryStart {
		c.RetryMax = max(DefaultRetryMax, c.RetryStart)
	}
	if c.TeardownRetry <= 0 {
		c.TeardownRetry = DefaultTeardownRetry
	}
	if c.TeardownRetryMax < c.TeardownRetry {
		c.TeardownRetryMax = max(DefaultTeardownRetryMx, c.TeardownRetry)
	}
	if c.OlderServerWait <= 0 {
		c.OlderServerWait = DefaultOlderServerWait
	}
	if c.TeardownAttempt <= 0 {
		c.TeardownAttempt = DefaultTeardownAttempt
	}
	if c.Context == nil {
		c.Context = context.Background()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Jitter == nil {
		c.Jitter = rand.Float64
	}
	return c
}

// retry spaces the asks the servers did not answer (RetryStart, doubled
// per failure up to RetryMax).
func (c VolumeConfig) retry() backoff.Backoff {
	return backoff.Backoff{Initial: c.RetryStart, Max: c.RetryMax}
}

// VolumeHooks are a client's volume hooks: the alloc hook that claims,
// stages and publishes a group's CSI volumes and tears them down, and the
// task hook that gives them to tasks. It also runs the teardowns of uses
// no alloc runner holds (Sweep) and of operators' claims.
type VolumeHooks struct {
	cfg    VolumeConfig
	logger hclog.Logger

	mu sync.Mutex
	// teardowns are those under way, by "<user>/<volume>"; done is closed
	// when one ends (finished, or the client shutting down).
	teardowns map[string]*teardown
	// publishes are the operators' claims' publishes under way, by
	// "<claim>/<volume>": a teardown of the claim cancels its publish and
	// waits for it to end before unpublishing, as the alloc runner runs
	// an alloc's Postrun only after its Prerun returned.
	publishes map[string]*publish
	wg        sync.WaitGroup
}

type teardown struct {
	done chan struct{}
	// kick wakes the wait before the next try (a detach asking for the
	// teardown now); whether the wait is cut short is want's to say, so a
	// kick left in the channel never skips a later backoff.
	kick chan struct{}

	mu sync.Mutex
	// tried is closed, and replaced, when a try ends; err is the last
	// try's error.
	tried chan struct{}
	err   error
	// started and ended count the tries begun and finished; want is the
	// try a detach waits for (started+1 when it kicked): the wait before
	// it is cut short.
	started, ended, want int
	// events are the alloc's task events (nil: a teardown no alloc
	// runner's hook joined, such as Sweep's or a detach's).
	events eventEmitter
}

func newTeardown() *teardown {
	return &teardown{done: make(chan struct{}), kick: make(chan struct{}, 1), tried: make(chan struct{})}
}

// startTry counts a try begun and drops a kick left from before it.
func (td *teardown) startTry() {
	td.mu.Lock()
	defer td.mu.Unlock()
	td.started++
	select {
	case <-td.kick:
	default:
	}
}

// endTry records a try's outcome and wakes those waiting for it.
func (td *teardown) endTry(err error) {
	td.mu.Lock()
	defer td.mu.Unlock()
	td.ended = td.started
	td.err = err
	close(td.tried)
	td.tried = make(chan struct{})
}

// join sets the task events of an alloc whose hook joins the teardown
// (a Postrun joining one a detach started).
func (td *teardown) join(events eventEmitter) {
	if events == nil {
		return
	}
	td.mu.Lock()
	defer td.mu.Unlock()
	if td.events == nil {
		td.events = events
	}
}

// emitter returns the task events to emit to, nil for none.
func (td *teardown) emitter() eventEmitter {
	td.mu.Lock()
	defer td.mu.Unlock()
	return td.events
}

// publish is an operator's claim's publish under way; done is closed when
// it ended.
type publish struct {
	user, volumeID string
	cancel         context.CancelFunc
	done           chan struct{}
}

// NewVolumeHooks returns the volume hooks of a client.
func NewVolumeHooks(cfg VolumeConfig) (*VolumeHooks, error) {
	if !filepath.IsAbs(cfg.DataDir) || cfg.NodeID == "" || cfg.Claims == nil || cfg.Volumes == nil || cfg.Plugins == nil || cfg.Reports == nil {
		return nil, fmt.Errorf("%w: volume hooks need an absolute data dir (%q), the node ID (%q), claims, volumes, plugins and reports",
			ErrNotConfigured, cfg.DataDir, cfg.NodeID)
	}
	cfg = cfg.withDefaults()
	return &VolumeHooks{cfg: cfg, logger: cfg.Logger.Named("volume_hook"), teardowns: map[string]*teardown{},
		publishes: map[string]*publish{}}, nil
}

// Wait waits for the background teardowns to end (they end with
// VolumeConfig.Context).
func (v *VolumeHooks) Wait() { v.wg.Wait() }

// csiVolume is one of a group's CSI volume requests, resolved for an
// alloc: the volume ID it claims.
type csiVolume struct {
	// name is the group's name for it, what volume_mount names.
	name     string
	req      *pb.VolumeRequest
	volumeID string
	// readOnly is set when the alloc's publish of the volume is read-only
	// (publishReadOnly).
	readOnly bool
}

// groupVolumes are the CSI volume requests of the alloc's group, by name
// (the order they are published in; a volume_mount names them).
func groupVolumes(g *pb.TaskGroup, a *pb.Allocation) []csiVolume {
	var out []csiVolume
	for _, name := range slices.Sorted(maps.Keys(g.GetVolumes())) {
		req := g.GetVolumes()[name]
		if req.GetType() != "" && req.GetType() != "csi" {
			continue
		}
		out = append(out, csiVolume{name: name, req: req, volumeID: rules.VolumeID(req, a.GetIndex())})
	}
	for i := range out {
		out[i].readOnly = publishReadOnly(g, out, out[i].volumeID)
	}
	return out
}

// publishReadOnly says whether the alloc publishes volumeID read-only:
// when every group request naming it is read-only (the claim only reads),
// or when every volume_mount of it, in every task of the group, is
// read-only (and there is one). A task under an unisolated driver sees the
// publish target itself, so publishing read-only is what makes its
// read_only mount read-only; a group that mounts the volume writable in
// one task and read-only in another publishes it writable, and the
// read-only task gets a read-only bind mount of its own (see
// taskReadOnlyPath).
func publishReadOnly(g *pb.TaskGroup, vols []csiVolume, volumeID string) bool {
	names := map[string]bool{}
	allReqs := true
	for _, cv := range vols {
		if cv.volumeID == volumeID {
			names[cv.name] = true
			allReqs = allReqs && cv.req.GetReadOnly()
		}
	}
	if allReqs {
		return true
	}
	mounts, allMounts := 0, true
	for _, t := range g.GetTasks() {
		for _, m := range t.GetVolumeMounts() {
			if names[m.GetVolume()] {
				mounts++
				allMounts = allMounts && (m.GetReadOnly() || g.GetVolumes()[m.GetVolume()].GetReadOnly())
			}
		}
	}
	return mounts > 0 && allMounts
}

// AllocHook is the factory of volume alloc hooks, for
// allocrunner.Hooks.Alloc: a hook for each alloc whose group asks for CSI
// volumes, nil for the others.
func (v *VolumeHooks) AllocHook() func(runhooks.AllocInfo) runhooks.Hook {
	return func(a runhooks.AllocInfo) runhooks.Hook {
		vols := groupVolumes(a.Group, a.Alloc)
		if len(vols) == 0 {
			return nil
		}
		return &volumeHook{v: v, allocID: a.Alloc.GetId(), vols: vols,
			logger: v.logger.With("alloc_id", a.Alloc.GetId())}
	}
}

// TaskHook is the factory of volume task hooks, for
// allocrunner.Hooks.Task: a hook for each task with volume_mount blocks
// naming a CSI volume of its group, nil for the others.
func (v *VolumeHooks) TaskHook() func(runhooks.AllocInfo, *pb.Task) runhooks.Hook {
	return func(a runhooks.AllocInfo, t *pb.Task) runhooks.Hook {
		vols := groupVolumes(a.Group, a.Alloc)
		var mounts []taskMount
		for _, m := range t.GetVolumeMounts() {
			for _, cv := range vols {
				if cv.name == m.GetVolume() {
					mounts = append(mounts, taskMount{mount: m, vol: cv,
						path: volumemanager.PublishPath(v.cfg.DataDir, a.Alloc.GetId(), cv.volumeID)})
				}
			}
		}
		if len(mounts) == 0 {
			return nil
		}
		return &mountHook{mounts: mounts}
	}
}

// volumeHook is the volume hook of one alloc.
type volumeHook struct {
	v       *VolumeHooks
	allocID string
	vols    []csiVolume
	logger  hclog.Logger
}

var (
	_ runhooks.PrerunHook       = (*volumeHook)(nil)
	_ runhooks.PostrunHook      = (*volumeHook)(nil)
	_ runhooks.AllocDestroyHook = (*volumeHook)(nil)
	_ runhooks.Timeouter        = (*volumeHook)(nil)
)

func (h *volumeHook) Name() string { return "csi_volumes" }

// Timeout lets the prerun wait for a claim's controller publish.
func (h *volumeHook) Timeout() time.Duration { return h.v.cfg.Timeout }
