package volumeloops

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/internal/clock"
)

// The leader's volume loops (DESIGN "How data flows", steps 3, 5 and 6):
//
//   - the attach reconciler (attach.go) makes the controller calls an
//     attachment waits for — ControllerPublishVolume for an attaching one,
//     ControllerUnpublishVolume for a detaching one — and writes each
//     outcome back as an AttachmentUpdate;
//   - the reaper (reaper.go) forces releasing claims on a node that is
//     down past force_detach_after, fenced or gone to node-detached;
//   - the reconcile pass (reconcile.go), every reconcile interval,
//     compares what a controller with LIST_VOLUMES_PUBLISHED_NODES says is
//     published with the attachments and repairs the drift.
//
// The first two are state watches: they wake on the raft applies that
// change what they read, and arm timers only for a retry's next_retry_at
// or a down node's deadline. Each starts with a pass over the whole state,
// which is how a new leader resumes whatever the last one left.

// volumeLoopConfig holds the volume loops' settings.
type volumeLoopConfig struct {
	// forceDetachAfter is how long a node stays down before its releasing
	// claims are forced to node-detached.
	forceDetachAfter time.Duration
	// reconcileInterval is the period of the reconcile pass; zero or less
	// turns it off.
	reconcileInterval time.Duration
	// retryInitial and retryMax bound the backoff of uncertain failures:
	// retryInitial after the first, doubling, never above retryMax.
	retryInitial, retryMax time.Duration
	// callTimeout bounds one controller call; writeTimeout one raft write.
	callTimeout, writeTimeout time.Duration
	// writeRetry is how soon a write that did not commit is tried again.
	writeRetry time.Duration
}

// Defaults: force_detach_after as Kubernetes' (6 minutes); a reconcile
// pass every 5 minutes (a second chance, never on the fast path).
const (
	DefaultForceDetachAfter  = 6 * time.Minute
	DefaultReconcileInterval = 5 * time.Minute
)

func defaultVolumeLoopConfig() volumeLoopConfig {
	return volumeLoopConfig{
		forceDetachAfter:  DefaultForceDetachAfter,
		reconcileInterval: DefaultReconcileInterval,
		retryInitial:      time.Second,
		retryMax:          2 * time.Minute,
		callTimeout:       2 * time.Minute,
		writeTimeout:      30 * time.Second,
		writeRetry:        time.Second,
	}
}

// Loops runs the volume loops while this server leads. One lives as
// long as the server; Run holds it for one leadership, and the next run
// waits until every call of the previous one has ended, so one server
// never has two calls in flight for one attachment.
type Loops struct {
	cfg     volumeLoopConfig
	state   func() *fsm.StateStore
	propose func(ctx context.Context, t fsm.MessageType, msg proto.Message) (*fsm.ApplyResult, error)
	// caller is nil while no forwarder is wired: the reaper runs, the
	// calls wait.
	caller ControllerCaller
	clock  clock.Clock
	logger hclog.Logger
	// jitter returns a number in [0, 1) for the backoff's jitter.
	jitter func() float64

	runMu sync.Mutex

	mu sync.Mutex
	// busy holds the plugins a worker is calling for; pluginLocks
	// serialize every call to one plugin (workers and the reconcile pass).
	busy        map[string]bool
	pluginLocks map[string]*sync.Mutex
	// avoid names, per attachment, the controller node whose last call
	// could not reach it: the next try goes elsewhere when it can.
	avoid map[attachmentKey]string
	// hold names, per attachment, when its outcome write failed without
	// the leadership ending: the call is not made again before then, so a
	// raft that refuses writes does not turn the loop into a spin of calls.
	hold map[attachmentKey]time.Time
	// wake is signalled when a worker ends or a retry comes due.
	wake chan struct{}
	// workers counts the running workers; run waits for them.
	workers sync.WaitGroup
}

type attachmentKey struct{ volume, node string }

// Core is what the volume loops need of the server core: the local state
// store and the leader's proposals.
type Core interface {
	State() *fsm.StateStore
	ApplyResult(ctx context.Context, t fsm.MessageType, msg proto.Message) (*fsm.ApplyResult, error)
}

// Config holds the settings of the volume loops the server's Config sets.
type Config struct {
	// ForceDetachAfter is how long a node stays down before its releasing
	// claims are forced to node-detached; zero or less means
	// DefaultForceDetachAfter.
	ForceDetachAfter time.Duration
	// ReconcileInterval is the period of the reconcile pass; zero means
	// DefaultReconcileInterval, negative turns the pass off.
	ReconcileInterval time.Duration
	Clock             clock.Clock
	Logger            hclog.Logger
}

// New returns the volume loops over core, making their controller calls
// through caller (nil: the reaper runs, the calls wait).
func New(core Core, caller ControllerCaller, c Config) *Loops {
	cfg := defaultVolumeLoopConfig()
	if c.ForceDetachAfter > 0 {
		cfg.forceDetachAfter = c.ForceDetachAfter
	}
	if c.ReconcileInterval != 0 {
		cfg.reconcileInterval = c.ReconcileInterval
	}
	return &Loops{
		cfg:     cfg,
		state:   core.State,
		propose: core.ApplyResult,
		caller:  caller,
		clock:   c.Clock,
		logger:  c.Logger.Named("volumes"),
		jitter:  rand.Float64,
	}
}

// Run runs the loops until ctx (the leadership) ends, and returns once
// every call and write it started has ended.
func (v *Loops) Run(ctx context.Context) {
	v.runMu.Lock()
	defer v.runMu.Unlock()
	v.mu.Lock()
	v.busy, v.pluginLocks, v.avoid, v.hold = map[string]bool{}, map[string]*sync.Mutex{}, map[attachmentKey]string{}, map[attachmentKey]time.Time{}
	v.wake = make(chan struct{}, 1)
	v.mu.Unlock()

	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); v.runReaper(ctx) }()
	if v.caller == nil {
		v.logger.Warn("no CSI controller forwarder: attachments wait for controller calls that cannot be made")
	} else {
		wg.Add(2)
		go func() { defer wg.Done(); v.runAttacher(ctx) }()
		go func() { defer wg.Done(); v.runReconcile(ctx) }()
	}
	wg.Wait()
	v.workers.Wait()
}

// kick wakes the attach reconciler. The channel is read under the lock:
// a retry timer of the last leadership may fire while run makes the next.
func (v *Loops) kick() {
	v.mu.Lock()
	wake := v.wake
	v.mu.Unlock()
	select {
	case wake <- struct{}{}:
	default:
	}
}

// pluginLock returns the lock that serializes calls to pluginID.
func (v *Loops) pluginLock(pluginID string) *sync.Mutex {
	v.mu.Lock()
	defer v.mu.Unlock()
	l, ok := v.pluginLocks[pluginID]
	if !ok {
		l = &sync.Mutex{}
		v.pluginLocks[pluginID] = l
	}
	return l
}

// backoff is the wait before try attempts+1 after attempts uncertain
// failures: retryInitial doubled per earlier failure, jittered by ±20%,
// capped at retryMax.
func (v *Loops) backoff(attempts int32) time.Duration {
	d := time.Duration(float64(v.doubled(attempts)) * (0.8 + 0.4*v.jitter()))
	return min(d, v.cfg.retryMax)
}

// nominalBackoff is backoff without its jitter, for a wait every pass
// and every leader must compute alike.
func (v *Loops) nominalBackoff(attempts int32) time.Duration {
	return min(v.doubled(attempts), v.cfg.retryMax)
}

// doubled is retryInitial doubled per failure before the last, capped at
// retryMax (internal/backoff without its jitter: the loops draw their own,
// so tests can fix it).
func (v *Loops) doubled(attempts int32) time.Duration {
	return backoff.Backoff{Initial: v.cfg.retryInitial, Max: v.cfg.retryMax}.Delay(int(attempts))
}

// write proposes one command with the write timeout.
func (v *Loops) write(ctx context.Context, t fsm.MessageType, msg proto.Message) error {
	_, err := v.writeResult(ctx, t, msg)
	return err
}

// writeResult is write for commands whose apply answers a value.
func (v *Loops) writeResult(ctx context.Context, t fsm.MessageType, msg proto.Message) (*fsm.ApplyResult, error) {
	wctx, cancel := context.WithTimeout(ctx, v.cfg.writeTimeout)
	defer cancel()
	return v.propose(wctx, t, msg)
}

// timerAt arms a timer calling f at when (at once if it has passed).
func (v *Loops) timerAt(when time.Time, f func()) clock.Timer {
	return v.clock.AfterFunc(max(when.Sub(v.clock.Now()), 0), f)
}
