package pluginsup

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/internal/pluginproc"
)

// Spec is one plugin of a catalog, as its Instance launches it.
type Spec[P Proc, T any] struct {
	Name string
	// Path and Args start the process.
	Path string
	Args []string
	// Builtin plugins ship in the berth binary: a record of another
	// berth version is not reattached.
	Builtin bool
	// Env is the process's environment besides go-plugin's socket
	// directory (which comes first).
	Env []string
	// ConfigDigest is stored in the Record (see Record.ConfigDigest).
	ConfigDigest string
	// Err is the catalog's problem with the plugin; when Errors.Fatal
	// says so, the plugin is never launched.
	Err error
	// Wrap names the plugin in an error (the package's *PluginError).
	Wrap     func(error) error
	Plugin   Plugin[P, T]
	Observer Observer[P, T]
}

// Running is one live process of an Instance.
type Running[P Proc, T any] struct {
	Proc P
	// Val is what Plugin.Setup returned for Proc.
	Val T
	Pid int

	sockDir   string
	startedAt time.Time
	gone      chan struct{}
	goneOnce  sync.Once
	// unsaved is the reattach record whose write failed at launch; watch
	// writes it again while the process runs.
	unsaved *Record
}

// stop kills r's process and removes its socket directory.
func (r *Running[P, T]) stop() {
	r.Proc.Kill()
	pluginproc.RemoveSocketDir(r.sockDir)
}

func (r *Running[P, T]) isGone() bool {
	select {
	case <-r.gone:
		return true
	default:
		return false
	}
}

// Instance supervises one plugin: a goroutine (run) launches its process,
// watches it and restarts it; Acquire hands the running process to calls.
type Instance[P Proc, T any] struct {
	s      *Supervisor[P, T]
	spec   Spec[P, T]
	logger hclog.Logger

	settled    chan struct{}
	settleOnce sync.Once

	mu sync.Mutex
	// cur is the running process, nil while there is none.
	cur *Running[P, T]
	// ready is closed when cur is set; replaced when cur is cleared.
	ready chan struct{}
	// fatal is a failure no restart fixes.
	fatal error
	// lastErr and reason are why no process runs now.
	lastErr error
	reason  string
}

// Logger is the instance's logger, with its name.
func (in *Instance[P, T]) Logger() hclog.Logger { return in.logger }

// Settled tells Start that the instance's first attempt has an outcome:
// Plugin.Watch calls it once it knows the health of a process.
func (in *Instance[P, T]) Settled() { in.settleOnce.Do(func() { close(in.settled) }) }

// Current returns the running process, nil while there is none.
func (in *Instance[P, T]) Current() *Running[P, T] {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.cur
}

// Acquire returns the running process. Without wait it fails at once with
// Errors.Unavailable when there is none; with wait it waits for the
// supervisor to (re)start one until ctx ends. Either way an instance down
// for good fails with ErrFailed, and a stopping one with ErrShutdown.
func (in *Instance[P, T]) Acquire(ctx context.Context, wait bool) (*Running[P, T], error) {
	errs := in.s.cfg.Errors
	for {
		in.mu.Lock()
		cur, ready, fatal := in.cur, in.ready, in.fatal
		out := Outage{Name: in.spec.Name, LastErr: in.lastErr, Reason: in.reason}
		in.mu.Unlock()
		switch {
		case fatal != nil:
			return nil, fmt.Errorf("%w: %w", ErrFailed, fatal)
		case in.s.ctx.Err() != nil:
			return nil, ErrShutdown
		case cur != nil:
			return cur, nil
		case !wait:
			return nil, errs.Unavailable(out)
		}
		select {
		case <-ready:
		case <-ctx.Done():
			out.Waited = ctx.Err()
			return nil, errs.Unavailable(out)
		case <-in.s.ctx.Done():
			return nil, ErrShutdown
		}
	}
}

// Gone is how a caller reports that r's process failed a call as gone:
// calls wait for the next process from now on, and the supervisor
// restarts without waiting for Watch to notice.
func (in *Instance[P, T]) Gone(r *Running[P, T]) {
	in.clear(r)
	r.goneOnce.Do(func() { close(r.gone) })
}

// run is the supervisor: launch, watch, restart with backoff, until ctx
// ends. rec is the record left by the previous client, if any.
func (in *Instance[P, T]) run(ctx context.Context, rec *Record) {
	defer in.Settled()
	cfg := in.s.cfg
	if err := in.spec.Err; err != nil && cfg.Errors.Fatal(err) {
		in.fail(err)
		return
	}
	attempt := 0
	lastLogged := ""
	for {
		r, reattached, err := in.launch(ctx, rec)
		rec = nil
		if ctx.Err() != nil {
			if r != nil {
				in.publish(r) // Shutdown stops it
			}
			return
		}
		if err != nil {
			if cfg.Errors.Fatal(err) {
				in.fail(err)
				return
			}
			attempt++
			delay := cfg.Backoff.Delay(attempt)
			in.down(Down{Err: err, Reason: fmt.Sprintf("%s; retrying in %s (attempt %d)", OneLine(err), delay, attempt), Delay: delay})
			// Said once at error level; repeats of the same failure
			// every minute would only bury other logs.
			if msg := err.Error(); msg != lastLogged {
				in.logger.Error(cfg.Noun+" unavailable", "error", err, "retry_in", delay, "attempt", attempt)
				lastLogged = msg
			} else {
				in.logger.Debug(cfg.Noun+" still unavailable", "error", err, "retry_in", delay, "attempt", attempt)
			}
			in.Settled()
			if !backoff.Sleep(ctx.Done(), delay) {
				return
			}
			continue
		}
		lastLogged = ""
		in.spec.Observer.Up(r, reattached)
		in.publish(r)
		cause := in.watch(ctx, r)
		if ctx.Err() != nil {
			return
		}
		in.clear(r)
		r.stop() // a process that stopped answering may still be there
		in.deleteRecord()
		if time.Since(r.startedAt) >= cfg.ResetAfter {
			attempt = 0
		}
		attempt++
		delay := cfg.Backoff.Delay(attempt)
		err = in.spec.Wrap(fmt.Errorf("%w: %v", ErrExited, cause))
		in.down(Down{Err: err, Reason: fmt.Sprintf("%s; restarting in %s (restart %d)", OneLine(err), delay, attempt),
			Pid: r.Pid, Cause: cause, Delay: delay})
		in.logger.Warn(cfg.Noun+" exited; restarting it", "cause", cause, "restart_in", delay, "restart", attempt)
		if !backoff.Sleep(ctx.Done(), delay) {
			return
		}
	}
}

// watch runs Plugin.Watch under a ctx that also ends when a caller
// reports r gone, and returns why r stopped.
func (in *Instance[P, T]) watch(ctx context.Context, r *Running[P, T]) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-r.gone:
			cancel()
		case <-wctx.Done():
		}
	}()
	if r.unsaved != nil {
		// Ended, and no write left in flight, before watch returns: the
		// caller deletes the record of a process that stopped.
		saved := make(chan struct{})
		go func() {
			defer close(saved)
			in.retryRecord(wctx, *r.unsaved)
		}()
		defer func() {
			cancel()
			<-saved
		}()
	}
	cause := in.spec.Plugin.Watch(wctx, r)
	if ctx.Err() == nil && r.isGone() {
		return fmt.Errorf("%s (pid %d) stopped answering calls", in.s.cfg.Noun, r.Pid)
	}
	return cause
}

// publish makes r the process calls get.
func (in *Instance[P, T]) publish(r *Running[P, T]) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.cur = r
	in.lastErr = nil
	select {
	case <-in.ready:
	default:
		close(in.ready)
	}
}

// clear forgets r if it is still the running process.
func (in *Instance[P, T]) clear(r *Running[P, T]) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cur == r {
		in.cur = nil
		in.ready = make(chan struct{})
	}
}

// take forgets and returns the running process, for Shutdown.
func (in *Instance[P, T]) take() *Running[P, T] {
	in.mu.Lock()
	defer in.mu.Unlock()
	r := in.cur
	if r != nil {
		in.cur = nil
		in.ready = make(chan struct{})
	}
	return r
}

// down records why no process runs and tells the Observer.
func (in *Instance[P, T]) down(d Down) {
	in.mu.Lock()
	in.lastErr, in.reason = d.Err, d.Reason
	in.mu.Unlock()
	in.spec.Observer.Down(d)
}

// fail records a failure that no restart fixes.
func (in *Instance[P, T]) fail(err error) {
	in.mu.Lock()
	in.fatal = err
	in.mu.Unlock()
	in.logger.Error(in.s.cfg.Noun+" config is invalid; it stays down until the agent config is fixed", "error", err)
	in.down(Down{Err: err, Reason: OneLine(err), Failed: true})
}

func (in *Instance[P, T]) fatalErr() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.fatal
}

// OneLine is err's message on one line, for a health reason shown in a
// table (`berth node status`); go-plugin's start errors span several.
func OneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }
