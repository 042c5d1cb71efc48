package pluginsup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/sdk"
)

// The tests run in synctest bubbles: the supervisor's backoff sleeps take
// no real time, and synctest.Wait returns once its goroutine is blocked
// (sleeping or waiting), so what it did by then can be checked.

func TestRestartBackoffDoublesUpToItsCapAndResets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		handshake := errors.New("handshake failed")
		h.p.launchErrs = []error{handshake, handshake, handshake, handshake}
		begin := time.Now()
		h.start(nil) // returns after the first failure
		for h.current() == 0 {
			time.Sleep(time.Millisecond)
		}
		// Backoff 1s doubling, capped at 4s: 1+2+4+4.
		if got := time.Since(begin); got < 11*time.Second || got > 11*time.Second+time.Millisecond {
			t.Errorf("running after %s, want 11s of backoff", got)
		}
		ups, downs, _ := h.p.seen()
		wantDelays := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second}
		if len(downs) != len(wantDelays) {
			t.Fatalf("downs %+v, want %d", downs, len(wantDelays))
		}
		for i, d := range downs {
			want := fmt.Sprintf("retrying in %s (attempt %d)", wantDelays[i], i+1)
			if d.Delay != wantDelays[i] || d.Pid != 0 || !errors.Is(d.Err, errStart) || !errors.Is(d.Err, handshake) || !strings.HasSuffix(d.Reason, want) {
				t.Errorf("down %d: %+v, want delay %s, a start error, reason ending %q", i+1, d, wantDelays[i], want)
			}
		}
		if len(ups) != 1 || ups[0] != (up{101, false}) {
			t.Fatalf("ups %v, want one of pid 101", ups)
		}

		// A process that ran for ResetAfter counts its failure as the first.
		time.Sleep(2 * time.Minute)
		h.p.proc(101).die()
		synctest.Wait()
		_, downs, _ = h.p.seen()
		exit := downs[len(downs)-1]
		if exit.Pid != 101 || exit.Delay != time.Second || !errors.Is(exit.Err, errExited) ||
			!strings.Contains(exit.Cause.Error(), "process 101 exited") || !strings.HasSuffix(exit.Reason, "restarting in 1s (restart 1)") {
			t.Errorf("exit after a long run: %+v", exit)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if p := h.current(); p != 102 {
			t.Fatalf("running pid %d after the restart, want 102", p)
		}
		// One that dies at once doubles the wait.
		h.p.proc(102).die()
		synctest.Wait()
		_, downs, _ = h.p.seen()
		if exit := downs[len(downs)-1]; exit.Pid != 102 || exit.Delay != 2*time.Second || !strings.HasSuffix(exit.Reason, "(restart 2)") {
			t.Errorf("exit right after a restart: %+v, want a 2s delay", exit)
		}
	})
}

func TestReattach(t *testing.T) {
	recorded := time.Unix(1000, 0)
	for _, tc := range []struct {
		name string
		// change makes the record (or the spec) differ from what runs.
		change     func(*Record, *Spec[*fakeProc, string])
		gone       bool
		reattached bool
	}{
		{name: "same", reattached: true},
		{name: "other berth version of a plugin_dir plugin", change: func(r *Record, _ *Spec[*fakeProc, string]) { r.BerthVersion = "0.9.0" }, reattached: true},
		{name: "other berth version of a built-in plugin", change: func(r *Record, s *Spec[*fakeProc, string]) { r.BerthVersion, s.Builtin = "0.9.0", true }},
		{name: "other path", change: func(r *Record, _ *Spec[*fakeProc, string]) { r.Path = "/opt/plugins/old" }},
		{name: "other args", change: func(r *Record, _ *Spec[*fakeProc, string]) { r.Args = []string{"serve", "-v"} }},
		{name: "other config", change: func(r *Record, _ *Spec[*fakeProc, string]) { r.ConfigDigest = "digest-0" }},
		{name: "process gone", gone: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := &Record{Path: testPath, Args: []string{"serve"}, ConfigDigest: "digest-1",
					Reattach: sdk.Reattach{Pid: 42, Network: "unix", Address: "/nonexistent/plugin42"}, LaunchedAt: recorded, BerthVersion: testVersion}
				h := newHarness(t, func(_ *Config, s *Spec[*fakeProc, string]) {
					if tc.change != nil {
						tc.change(rec, s)
					}
				})
				old := newFakeProc(42)
				if !tc.gone {
					h.p.procs[42] = old
				}
				h.recs.recs["fake"] = *rec
				h.start(map[string]*Record{"fake": rec})

				ups, _, launches := h.p.seen()
				saved, ok := h.recs.get("fake")
				if launches[0].Reattach == nil || launches[0].Reattach.Pid != 42 {
					t.Fatalf("first launch %+v, want a reattach to pid 42", launches[0])
				}
				if tc.reattached {
					if len(launches) != 1 || len(ups) != 1 || ups[0] != (up{42, true}) || h.current() != 42 || old.wasKilled() {
						t.Fatalf("launches %d, ups %v, running %d, old killed %t: want pid 42 reattached and alone",
							len(launches), ups, h.current(), old.wasKilled())
					}
					if !ok || saved.Reattach.Pid != 42 || !saved.LaunchedAt.Equal(recorded) {
						t.Errorf("record %+v, want pid 42 launched at %s", saved, recorded)
					}
					return
				}
				if len(launches) != 2 || launches[1].Cmd == nil || len(ups) != 1 || ups[0] != (up{101, false}) || h.current() != 101 {
					t.Fatalf("launches %+v, ups %v, running %d: want a new process 101", launches, ups, h.current())
				}
				if !tc.gone && !old.wasKilled() {
					t.Error("the process started differently was left running")
				}
				if !ok || saved.Reattach.Pid != 101 || saved.LaunchedAt.Equal(recorded) || h.recs.deletes != 1 {
					t.Errorf("record %+v after %d deletes, want the new process's after deleting the old", saved, h.recs.deletes)
				}
			})
		})
	}
}

func TestDeadPluginIsRestartedAndCallsSayWhyMeanwhile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.start(nil)
		if dirs := socketDirs(t); len(dirs) != 1 {
			t.Fatalf("socket dirs of the running plugin: %v", dirs)
		}
		h.p.proc(101).die()
		synctest.Wait()

		// Down for 1s: a call that does not wait says why.
		r, err := h.in.Acquire(context.Background(), false)
		if r != nil || !errors.Is(err, errUnavailable) || !errors.Is(err, errExited) || errcode.Code(err) != codes.Unavailable {
			t.Fatalf("Acquire during the backoff: %v, %v; want unavailable because the plugin exited", r, err)
		}
		if !strings.Contains(err.Error(), "restarting in 1s (restart 1)") {
			t.Errorf("error %q does not say when the restart comes", err)
		}
		if _, ok := h.recs.get("fake"); ok {
			t.Error("the dead process's record is kept")
		}
		if dirs := socketDirs(t); len(dirs) != 0 {
			t.Errorf("socket dirs left by the dead process: %v", dirs)
		}
		// One that waits gets the next process.
		r, err = h.in.Acquire(context.Background(), true)
		if err != nil || r.Pid != 102 || r.Val != "client of 102" {
			t.Fatalf("Acquire that waits: %+v, %v; want pid 102", r, err)
		}
		if rec, ok := h.recs.get("fake"); !ok || rec.Reattach.Pid != 102 {
			t.Errorf("record %+v, want the new process's", rec)
		}
	})
}

func TestConcurrentCallsWaitThroughARestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.start(nil)
		first := h.in.Current()
		// A caller finds the plugin gone though its process still lives
		// (it stopped answering): the supervisor replaces it at once.
		h.in.Gone(first)
		const calls = 16
		got := make(chan *Running[*fakeProc, string], calls)
		var wg sync.WaitGroup
		for range calls {
			wg.Go(func() {
				r, err := h.in.Acquire(context.Background(), true)
				if err != nil {
					t.Errorf("Acquire: %v", err)
				}
				got <- r
			})
		}
		// One with a deadline before the restart gives up, saying why.
		short, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		if _, err := h.in.Acquire(short, true); !errors.Is(err, errUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Acquire with a deadline before the restart: %v", err)
		}
		wg.Wait()
		close(got)
		for r := range got {
			if r == nil || r.Pid != 102 {
				t.Fatalf("a call got %+v, want the restarted pid 102", r)
			}
		}
		if !first.Proc.wasKilled() {
			t.Error("the process that stopped answering was left running")
		}
		_, downs, _ := h.p.seen()
		if len(downs) != 1 || downs[0].Pid != 101 || !strings.Contains(downs[0].Cause.Error(), "fake plugin (pid 101) stopped answering calls") {
			t.Fatalf("downs %+v, want one saying pid 101 stopped answering", downs)
		}
		// A late report about the old process leaves the new one alone.
		h.in.Gone(first)
		synctest.Wait()
		if p := h.current(); p != 102 {
			t.Errorf("running pid %d after a stale report, want 102", p)
		}
	})
}

func TestFailedSetupStopsTheProcessAndRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.p.setupErrs = []error{errors.New("SetConfig: connection reset")}
		h.start(nil)
		if !h.p.proc(101).wasKilled() {
			t.Error("the process whose setup failed was left running")
		}
		if dirs := socketDirs(t); len(dirs) != 0 {
			t.Errorf("socket dirs left by the failed setup: %v", dirs)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if p := h.current(); p != 102 {
			t.Fatalf("running pid %d after the retry, want 102", p)
		}
	})
}

func TestFailureForGoodIsNotRetried(t *testing.T) {
	bad := fmt.Errorf("%w: unknown key \"capacityy\"", errBadConfig)
	for _, tc := range []struct {
		name    string
		tweak   func(*Config, *Spec[*fakeProc, string])
		launchs int
	}{
		{"catalog", func(_ *Config, s *Spec[*fakeProc, string]) { s.Err = bad }, 0},
		{"setup", nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, tc.tweak)
				h.p.setupErrs = []error{bad}
				if err := h.s.Start(context.Background(), nil); !errors.Is(err, errBadConfig) {
					t.Fatalf("Start = %v, want the config error", err)
				}
				time.Sleep(time.Hour)
				_, downs, launches := h.p.seen()
				if len(launches) != tc.launchs || len(downs) != 1 || !downs[0].Failed || downs[0].Delay != 0 {
					t.Fatalf("launches %d, downs %+v: want %d launches and one failure for good", len(launches), downs, tc.launchs)
				}
				_, err := h.in.Acquire(context.Background(), true)
				if !errors.Is(err, errFailed) || !errors.Is(err, errBadConfig) {
					t.Errorf("Acquire = %v, want failed for good", err)
				}
				if _, ok := h.recs.get("fake"); ok {
					t.Error("a record is kept for a plugin that failed for good")
				}
			})
		})
	}
}

func TestShutdownStopsEveryProcessOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.start(nil)
		if err := h.s.Start(context.Background(), nil); !errors.Is(err, ErrStarted) {
			t.Errorf("second Start = %v, want ErrStarted", err)
		}
		proc := h.p.proc(101)
		befores := 0
		errBefore := errors.New("tasks still running")
		before := func(started bool) error {
			befores++
			if !started || proc.wasKilled() || !h.s.Stopping() {
				t.Errorf("before: started %t, process killed %t, stopping %t; want it to run first, once stopping", started, proc.wasKilled(), h.s.Stopping())
			}
			return errBefore
		}
		if err := h.s.Shutdown(before); !errors.Is(err, errBefore) {
			t.Errorf("Shutdown = %v, want before's error", err)
		}
		if err := h.s.Shutdown(before); err != nil || befores != 1 {
			t.Errorf("second Shutdown = %v after %d runs of before, want nothing done", err, befores)
		}
		if !proc.wasKilled() {
			t.Error("Shutdown left the process running")
		}
		if _, ok := h.recs.get("fake"); ok {
			t.Error("Shutdown kept the record")
		}
		if dirs := socketDirs(t); len(dirs) != 0 {
			t.Errorf("socket dirs left: %v", dirs)
		}
		if _, err := h.in.Acquire(context.Background(), true); !errors.Is(err, errShutdown) {
			t.Errorf("Acquire after Shutdown = %v", err)
		}
	})
}

func TestShutdownWhileWaitingEndsTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.p.launchErrs = []error{errors.New("handshake failed")}
		h.start(nil)
		waited := make(chan error, 1)
		go func() {
			_, err := h.in.Acquire(context.Background(), true)
			waited <- err
		}()
		synctest.Wait()
		h.s.Shutdown(nil)
		if err := <-waited; !errors.Is(err, errShutdown) {
			t.Errorf("Acquire waiting through Shutdown = %v", err)
		}
		if err := h.s.Start(context.Background(), nil); !errors.Is(err, errShutdown) {
			t.Errorf("Start after Shutdown = %v", err)
		}
	})
}

func TestAbandonLeavesProcessesAndRecords(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.start(nil)
		h.s.Abandon()
		if h.p.proc(101).wasKilled() {
			t.Error("Abandon stopped the process")
		}
		if rec, ok := h.recs.get("fake"); !ok || rec.Reattach.Pid != 101 {
			t.Errorf("record after Abandon: %+v, %t", rec, ok)
		}
		if _, err := h.in.Acquire(context.Background(), true); !errors.Is(err, errShutdown) {
			t.Errorf("Acquire after Abandon = %v", err)
		}
		// The manager's Shutdown that follows in a test stops nothing.
		h.s.Shutdown(nil)
		if h.p.proc(101).wasKilled() {
			t.Error("Shutdown after Abandon stopped the process")
		}
	})
}

// socketDirs lists the harness plugin's socket directories.
func socketDirs(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(os.TempDir(), "berth-fake-fake-*"))
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

func TestAddRefusesANamelessOrRepeatedPlugin(t *testing.T) {
	h := newHarness(t, nil)
	for _, name := range []string{"", "fake"} {
		spec := Spec[*fakeProc, string]{Name: name, Path: testPath, Plugin: h.p, Observer: h.p}
		if in, err := h.s.Add(spec); in != nil || !errors.Is(err, ErrCatalog) || errcode.Code(err) != codes.InvalidArgument {
			t.Errorf("Add(%q) = %v, %v; want ErrCatalog", name, in, err)
		}
	}
	if names := h.s.Names(); len(names) != 1 || names[0] != "fake" {
		t.Errorf("names %v after refused Adds, want only fake", names)
	}
}

// A reattach record that cannot be written when the process is launched
// (a full disk) is written again, backing off from 100ms, until it is:
// without it a restarted client would start a second process while this
// one, and the tasks it runs, keep running unknown.
func TestAReattachRecordNotWrittenIsWrittenAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.recs.failPuts = 3
		begin := time.Now()
		h.start(nil)
		synctest.Wait()
		if p := h.current(); p != 101 {
			t.Fatalf("running pid %d, want 101 (a record that cannot be written does not stop the process)", p)
		}
		if _, ok := h.recs.get("fake"); ok {
			t.Fatal("record written while the writes fail")
		}
		// Launch, then tries after 100ms and 200ms fail; the one 400ms later is written.
		for {
			if rec, ok := h.recs.get("fake"); ok {
				if rec.Reattach.Pid != 101 {
					t.Fatalf("record %+v, want pid 101", rec)
				}
				break
			}
			if time.Since(begin) > time.Hour {
				t.Fatal("the reattach record is not written an hour after the launch whose write failed")
			}
			time.Sleep(time.Millisecond)
		}
		if got := time.Since(begin); got < 700*time.Millisecond || got > 701*time.Millisecond {
			t.Errorf("record written after %s, want 700ms of backoff", got)
		}
		h.recs.mu.Lock()
		puts := h.recs.puts
		h.recs.mu.Unlock()
		time.Sleep(time.Minute)
		synctest.Wait()
		h.recs.mu.Lock()
		defer h.recs.mu.Unlock()
		if h.recs.puts != puts || puts != 4 {
			t.Fatalf("%d writes then %d a minute later, want 4 and no more once written", puts, h.recs.puts)
		}
	})
}
