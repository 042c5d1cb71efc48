package pluginsup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/sdk"
)

// The sentinels of the fake package the tests supervise for.
var (
	errStart       = ErrStart
	errExited      = ErrExited
	errShutdown    = ErrShutdown
	errFailed      = ErrFailed
	errUnavailable = errcode.New(codes.Unavailable, "fake plugin is not available")
	errBadConfig   = errcode.New(codes.InvalidArgument, "fake plugin config is invalid")
)

var fakeErrors = Errors{
	Fatal: func(err error) bool { return errors.Is(err, errBadConfig) },
	Unavailable: func(o Outage) error {
		err := fmt.Errorf("%w: %s (%s)", errUnavailable, o.Name, o.Reason)
		if o.Waited != nil {
			err = fmt.Errorf("%w while waiting: %w", err, o.Waited)
		}
		if o.LastErr != nil {
			err = fmt.Errorf("%w; last failure: %w", err, o.LastErr)
		}
		return err
	},
}

// fakeProc is a plugin process that exists only in the test: it dies when
// told to (die) or killed.
type fakeProc struct {
	pid  int
	dead chan struct{}
	once sync.Once

	mu     sync.Mutex
	killed bool
}

var _ Proc = (*fakeProc)(nil)

func newFakeProc(pid int) *fakeProc { return &fakeProc{pid: pid, dead: make(chan struct{})} }

func (p *fakeProc) Pid() int { return p.pid }

func (p *fakeProc) Exited() bool {
	select {
	case <-p.dead:
		return true
	default:
		return false
	}
}

func (p *fakeProc) Kill() {
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	p.die()
}

func (p *fakeProc) Reattach() (sdk.Reattach, bool) {
	return sdk.Reattach{Pid: p.pid, Network: "unix", Address: fmt.Sprintf("/nonexistent/plugin%d", p.pid)}, true
}

// die ends the process as a crash would.
func (p *fakeProc) die() { p.once.Do(func() { close(p.dead) }) }

func (p *fakeProc) wasKilled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killed
}

// up is one Observer.Up call.
type up struct {
	pid        int
	reattached bool
}

// fakePlugin is the Plugin and Observer of one instance: it launches
// fakeProcs, failing the launches and setups it is told to, and records
// what the instance told it.
type fakePlugin struct {
	in *Instance[*fakeProc, string]

	mu         sync.Mutex
	nextPid    int
	procs      map[int]*fakeProc
	launchErrs []error
	setupErrs  []error
	launches   []sdk.LaunchConfig
	ups        []up
	downs      []Down
}

var (
	_ Plugin[*fakeProc, string]   = (*fakePlugin)(nil)
	_ Observer[*fakeProc, string] = (*fakePlugin)(nil)
)

func (f *fakePlugin) Prepare() error { return nil }

// Launch starts a fakeProc, or reattaches to one of procs that lives.
func (f *fakePlugin) Launch(_ context.Context, cfg sdk.LaunchConfig) (*fakeProc, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.launches = append(f.launches, cfg)
	if cfg.Reattach != nil {
		p, ok := f.procs[cfg.Reattach.Pid]
		if !ok || p.Exited() {
			return nil, fmt.Errorf("no plugin process %d", cfg.Reattach.Pid)
		}
		return p, nil
	}
	if cfg.Cmd == nil || cfg.Cmd.Path == "" {
		return nil, errors.New("launch without a command")
	}
	if len(f.launchErrs) > 0 {
		err := f.launchErrs[0]
		f.launchErrs = f.launchErrs[1:]
		return nil, err
	}
	f.nextPid++
	p := newFakeProc(f.nextPid)
	f.procs[p.pid] = p
	return p, nil
}

func (f *fakePlugin) Setup(_ context.Context, p *fakeProc) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.setupErrs) > 0 {
		err := f.setupErrs[0]
		f.setupErrs = f.setupErrs[1:]
		return "", err
	}
	return fmt.Sprintf("client of %d", p.pid), nil
}

// Watch knows the process is healthy at once, then waits for its death.
func (f *fakePlugin) Watch(ctx context.Context, r *Running[*fakeProc, string]) error {
	f.in.Settled()
	select {
	case <-r.Proc.dead:
		return fmt.Errorf("process %d exited", r.Pid)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fakePlugin) Up(r *Running[*fakeProc, string], reattached bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ups = append(f.ups, up{r.Pid, reattached})
}

func (f *fakePlugin) Down(d Down) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.downs = append(f.downs, d)
}

func (f *fakePlugin) proc(pid int) *fakeProc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.procs[pid]
}

func (f *fakePlugin) seen() ([]up, []Down, []sdk.LaunchConfig) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.ups), slices.Clone(f.downs), slices.Clone(f.launches)
}

// fakeRecords is a Records in memory that counts its writes.
type fakeRecords struct {
	mu      sync.Mutex
	recs    map[string]Record
	deletes int
	// failPuts is how many of the next writes fail (a full disk).
	failPuts int
	puts     int
}

func (r *fakeRecords) PutRecord(name string, rec Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.puts++
	if r.failPuts > 0 {
		r.failPuts--
		return errors.New("write state.db: no space left on device")
	}
	r.recs[name] = rec
	return nil
}

func (r *fakeRecords) DeleteRecord(name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.recs, name)
	r.deletes++
	return nil
}

func (r *fakeRecords) get(name string) (Record, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, ok := r.recs[name]
	return rec, ok
}

// harness is a supervisor of one fake plugin, "fake".
type harness struct {
	t    *testing.T
	s    *Supervisor[*fakeProc, string]
	in   *Instance[*fakeProc, string]
	p    *fakePlugin
	recs *fakeRecords
}

const (
	testPath    = "/opt/plugins/fake"
	testVersion = "1.0.0"
)

// newHarness builds the harness; tweak may change the config and spec
// before the instance is added.
func newHarness(t *testing.T, tweak func(*Config, *Spec[*fakeProc, string])) *harness {
	t.Helper()
	// Socket directories go to a directory of the test's, which tests
	// check is left empty.
	t.Setenv("TMPDIR", t.TempDir())
	h := &harness{t: t, p: &fakePlugin{procs: map[int]*fakeProc{}, nextPid: 100}, recs: &fakeRecords{recs: map[string]Record{}}}
	cfg := Config{
		Kind: "fake", Noun: "fake plugin", LogKey: "fake",
		Options: Options{StartTimeout: time.Minute, Backoff: backoff.Backoff{Initial: time.Second, Max: 4 * time.Second},
			ResetAfter: time.Minute, BerthVersion: testVersion},
		Records: h.recs, Errors: fakeErrors,
	}
	spec := Spec[*fakeProc, string]{
		Name: "fake", Path: testPath, Args: []string{"serve"}, ConfigDigest: "digest-1",
		Wrap:   func(err error) error { return fmt.Errorf("plugin %q: %w", "fake", err) },
		Plugin: h.p, Observer: h.p,
	}
	if tweak != nil {
		tweak(&cfg, &spec)
	}
	h.s = New[*fakeProc, string](cfg)
	in, err := h.s.Add(spec)
	if err != nil {
		t.Fatal(err)
	}
	h.in = in
	h.p.in = h.in
	// Inside a synctest bubble every goroutine must end before the test.
	t.Cleanup(func() { h.s.Shutdown(nil) })
	return h
}

// start runs Start with the records given and fails the test on an error.
func (h *harness) start(records map[string]*Record) {
	h.t.Helper()
	if err := h.s.Start(context.Background(), func() map[string]*Record { return records }); err != nil {
		h.t.Fatalf("Start: %v", err)
	}
}

// current is the running process's pid, 0 if none.
func (h *harness) current() int {
	if r := h.in.Current(); r != nil {
		return r.Pid
	}
	return 0
}
