package pluginsup

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/sdk"
)

var (
	// ErrStarted is returned by Supervisor.Start when it was called
	// before.
	ErrStarted = errcode.New(codes.FailedPrecondition, "plugin manager already started")

	// ErrCatalog is returned by Supervisor.Add for a plugin with no name,
	// or with the name of one added before.
	ErrCatalog = errcode.New(codes.InvalidArgument, "invalid plugin catalog")
)

// Proc is one plugin process as the sdk's launchers return it
// (*sdk.DriverPlugin, *sdk.StoragePlugin).
type Proc interface {
	Pid() int
	Exited() bool
	Kill()
	Reattach() (sdk.Reattach, bool)
}

// Plugin is how a package launches, readies and watches one kind of
// plugin. The Instance calls it from its supervising goroutine only.
type Plugin[P Proc, T any] interface {
	// Prepare runs before each launch of a new process (not before a
	// reattach): the executable check, directories the process needs.
	Prepare() error
	// Launch starts the process cfg.Cmd describes, or reattaches to
	// cfg.Reattach (sdk.LaunchDriver, sdk.LaunchStorageAdapter).
	Launch(ctx context.Context, cfg sdk.LaunchConfig) (P, error)
	// Setup readies a launched or reattached process (checks its name,
	// configures it) and returns what calls use. On error the process is
	// killed and its record deleted.
	Setup(ctx context.Context, proc P) (T, error)
	// Watch checks on r until its process is gone or ctx ends, which it
	// also does when a caller reports r gone, and returns why it stopped.
	// It calls Instance.Settled once r's health is first known.
	Watch(ctx context.Context, r *Running[P, T]) error
}

// Observer hears what happens to an instance, in order, from its
// supervising goroutine.
type Observer[P Proc, T any] interface {
	// Up is told of a ready process before calls can reach it.
	Up(r *Running[P, T], reattached bool)
	// Down is told that no process runs, and why.
	Down(d Down)
}

// Down is why an instance has no process.
type Down struct {
	// Err is the package's error: a failed launch, ErrExited wrapping
	// Cause, or a failure for good.
	Err error
	// Reason is Err on one line, saying when the next attempt comes.
	Reason string
	// Pid and Cause are the process that stopped and why; Pid is 0 when
	// a launch failed.
	Pid   int
	Cause error
	// Delay is the wait before the next attempt; 0 when Failed.
	Delay time.Duration
	// Failed is true for a failure no restart fixes: none follows.
	Failed bool
}

// Outage is why Acquire has no process to give; Errors.Unavailable turns
// it into the package's error.
type Outage struct {
	Name string
	// LastErr is the last launch failure or exit, nil before the first.
	LastErr error
	// Reason is the instance's last Down reason ("starting" before any).
	Reason string
	// Waited is the ctx error that ended a wait; nil when Acquire did not
	// wait.
	Waited error
}

// Errors are the kind-specific part of a package's answers; the sentinels
// (ErrStart, ErrExited, ErrFailed, ErrShutdown) are this package's.
type Errors struct {
	// Fatal reports a failure no restart fixes (an invalid config).
	Fatal func(error) bool
	// Unavailable is what Acquire returns when no process runs.
	Unavailable func(Outage) error
}

// Record is how to reattach to a plugin process after a client restart,
// and what it was started with, so that one started differently is
// replaced rather than reattached.
type Record struct {
	Path string
	Args []string
	// ConfigDigest identifies the config given outside the command line;
	// empty for plugins configured over RPC.
	ConfigDigest string
	Reattach     sdk.Reattach
	LaunchedAt   time.Time
	// BerthVersion is the version of berth that launched the process;
	// only compared for built-in plugins.
	BerthVersion string
}

// Records persists each instance's Record, by plugin name.
type Records interface {
	PutRecord(name string, rec Record) error
	DeleteRecord(name string) error
}

// Config configures a Supervisor.
type Config struct {
	// Kind names the socket directories (pluginproc.NewSocketDir):
	// "driver", "csi".
	Kind string
	// Noun names a plugin in logs and errors: "driver plugin".
	Noun string
	// LogKey is the log field of an instance's name: "driver".
	LogKey string
	// Options are the manager's: timeouts, backoff, logger, version.
	Options
	Records Records
	Errors  Errors
}

// Supervisor holds a manager's instances: it starts them together, and
// stops or abandons them together.
type Supervisor[P Proc, T any] struct {
	cfg       Config
	instances map[string]*Instance[P, T]

	// ctx ends the instances' goroutines and the waits of Acquire.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	started  bool
	stopping bool
}

// New returns a supervisor with no instances; cfg.Options' zero fields
// take their defaults.
func New[P Proc, T any](cfg Config) *Supervisor[P, T] {
	cfg.Options.SetDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	return &Supervisor[P, T]{cfg: cfg, instances: map[string]*Instance[P, T]{}, ctx: ctx, cancel: cancel}
}

// Add adds the instance of spec, before Start.
func (s *Supervisor[P, T]) Add(spec Spec[P, T]) (*Instance[P, T], error) {
	if spec.Name == "" {
		return nil, fmt.Errorf("%w: a %s has no name", ErrCatalog, s.cfg.Noun)
	}
	if _, dup := s.instances[spec.Name]; dup {
		return nil, fmt.Errorf("%w: %s %q is in it twice", ErrCatalog, s.cfg.Noun, spec.Name)
	}
	in := &Instance[P, T]{
		s:       s,
		spec:    spec,
		logger:  s.cfg.Logger.With(s.cfg.LogKey, spec.Name),
		settled: make(chan struct{}),
		ready:   make(chan struct{}),
		reason:  "starting",
	}
	s.instances[spec.Name] = in
	return in, nil
}

// Names returns the instances' names, sorted.
func (s *Supervisor[P, T]) Names() []string { return slices.Sorted(maps.Keys(s.instances)) }

// Instance returns the instance name, if there is one.
func (s *Supervisor[P, T]) Instance(name string) (*Instance[P, T], bool) {
	in, ok := s.instances[name]
	return in, ok
}

// Start runs every instance, reattaching those load returns a Record for,
// and returns once each has settled (see Instance.Settled) or failed its
// first attempt; failing instances keep being retried in the background.
// load runs only when Start goes ahead. The error joins the failures for
// good; ctx's error means some instances had not settled when it ended.
func (s *Supervisor[P, T]) Start(ctx context.Context, load func() map[string]*Record) error {
	s.mu.Lock()
	switch {
	case s.stopping:
		s.mu.Unlock()
		return ErrShutdown
	case s.started:
		s.mu.Unlock()
		return ErrStarted
	}
	s.started = true
	s.mu.Unlock()

	var records map[string]*Record
	if load != nil {
		records = load()
	}
	names := s.Names()
	for _, name := range names {
		in, rec := s.instances[name], records[name]
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			in.run(s.ctx, rec)
		}()
	}
	var errs []error
	for _, name := range names {
		in := s.instances[name]
		select {
		case <-in.settled:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s %q to start: %w", s.cfg.Noun, name, ctx.Err())
		}
		if err := in.fatalErr(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Stopping reports whether Shutdown or Abandon has begun.
func (s *Supervisor[P, T]) Stopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// Shutdown refuses Start from now on, runs before (if not nil; started
// says whether Start ran), then stops supervising and shuts every process
// down, deleting its record: a client that stops on purpose leaves no
// plugin running. Only the first call does anything; it returns before's
// error.
func (s *Supervisor[P, T]) Shutdown(before func(started bool) error) error {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return nil
	}
	s.stopping = true
	started := s.started
	s.mu.Unlock()

	var err error
	if before != nil {
		err = before(started)
	}
	s.cancel()
	s.wg.Wait()
	var wg sync.WaitGroup
	for _, in := range s.instances {
		r := in.take()
		if r == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.stop()
			in.deleteRecord()
			in.logger.Info(s.cfg.Noun+" stopped", "pid", r.Pid)
		}()
	}
	wg.Wait()
	return err
}

// Abandon stops supervising without stopping the processes and keeps
// their records, as a crashed client would: tests use it to restart a
// client against live plugins.
func (s *Supervisor[P, T]) Abandon() {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	for _, in := range s.instances {
		in.take()
	}
}

// Context ends when the supervisor stops (Shutdown, Abandon): work a
// manager does for it, such as stopping a process of a stale record,
// gives up then.
func (s *Supervisor[P, T]) Context() context.Context { return s.ctx }
