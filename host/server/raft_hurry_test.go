package server

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// stubRaft stands in for raft in tests of hurryElection alone: a leader,
// a last contact and a reloadable config the test sets, and every
// ReloadConfig recorded.
type stubRaft struct {
	mu      sync.Mutex
	leader  raft.ServerID
	contact time.Time
	rc      raft.ReloadableConfig
	reloads []raft.ReloadableConfig
	voters  []raft.ServerID
}

func (r *stubRaft) LeaderWithID() (raft.ServerAddress, raft.ServerID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return "", r.leader
}

func (r *stubRaft) LastContact() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.contact
}

func (r *stubRaft) ReloadableConfig() raft.ReloadableConfig {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rc
}

func (r *stubRaft) ReloadConfig(rc raft.ReloadableConfig) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rc = rc
	r.reloads = append(r.reloads, rc)
	return nil
}

func (r *stubRaft) GetConfiguration() raft.ConfigurationFuture {
	var c raft.Configuration
	for _, id := range r.voters {
		c.Servers = append(c.Servers, raft.Server{Suffrage: raft.Voter, ID: id})
	}
	return stubConfigFuture{c}
}

func (r *stubRaft) set(leader raft.ServerID, contact time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.leader, r.contact = leader, contact
}

// heartbeats returns the heartbeat timeouts of every reload so far.
func (r *stubRaft) heartbeats() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var hbs []time.Duration
	for _, rc := range r.reloads {
		hbs = append(hbs, rc.HeartbeatTimeout)
	}
	return hbs
}

type stubConfigFuture struct{ c raft.Configuration }

func (stubConfigFuture) Error() error                        { return nil }
func (stubConfigFuture) Index() uint64                       { return 1 }
func (f stubConfigFuture) Configuration() raft.Configuration { return f.c }

// stubLease is the lease, heartbeat and election timeout of the stubbed
// servers: berth's production shape (raft_lease.go: lease == heartbeat).
const stubLease = time.Second

// hurryServer is a server named self whose hurry acts on a stub raft run
// as in production (lease == heartbeat == election timeout), whose leader
// "dead" contacted it just now, among voters a, b and dead. probe answers
// the hurry's re-dials of the dead leader.
func hurryServer(t *testing.T, self string, probe func(context.Context, string) bool) (*Server, *stubRaft, context.CancelFunc) {
	normal := raft.ReloadableConfig{HeartbeatTimeout: stubLease, ElectionTimeout: stubLease, TrailingLogs: 10240}
	r := &stubRaft{leader: "dead", contact: time.Now(), rc: normal, voters: []raft.ServerID{"a", "b", "dead"}}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{id: self, logger: hclog.NewNullLogger(), shutdownCtx: ctx, cfg: &Config{}}
	s.raftTimeouts.lease = stubLease
	s.raftTimeouts.normal = normal
	s.raftTimeouts.stub = r
	s.death.probe = probe
	return s, r, cancel
}

func refused(context.Context, string) bool  { return true }
func connects(context.Context, string) bool { return false }

// runHurry runs hurryElection as the watcher does and returns a channel
// closed when it returns.
func runHurry(s *Server, changes <-chan raft.Observation) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.hurryElection("dead", "10.0.0.3:4647", changes)
	}()
	return done
}

func isDone(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// TestHurryAtLeaseEqualsHeartbeatShortensByAMillisecondAndRestores: the
// path every real cluster takes. Step 1 lengthens the timeouts to
// lease+1ms, step 2 (a lease after the last contact) shortens them to the
// lease, which is what fires raft's heartbeat timer, and the configured
// timeouts (equal to the lease) are back once a leader is known.
func TestHurryAtLeaseEqualsHeartbeatShortensByAMillisecondAndRestores(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, r, cancel := hurryServer(t, "a", refused)
		defer cancel()
		changes := make(chan raft.Observation, 1)
		done := runHurry(s, changes)
		synctest.Wait()
		if got := r.heartbeats(); len(got) != 1 || got[0] != stubLease+time.Millisecond {
			t.Fatalf("reloads before the lease passed: %v, want [%v]", got, stubLease+time.Millisecond)
		}
		time.Sleep(stubLease + time.Millisecond) // synctest's clock
		synctest.Wait()
		if got := r.heartbeats(); len(got) != 2 || got[1] != stubLease {
			t.Fatalf("reloads a lease after the contact: %v, want [%v %v]", got, stubLease+time.Millisecond, stubLease)
		}
		if rc := r.ReloadableConfig(); rc.ElectionTimeout != stubLease || rc.TrailingLogs != 10240 {
			t.Errorf("hurried config %+v: want election = lease and the rest kept", rc)
		}
		if n := s.death.hurried.Load(); n != 1 {
			t.Errorf("hurried %d times, want 1", n)
		}
		r.set("b", time.Now())
		changes <- raft.Observation{}
		synctest.Wait()
		if !isDone(done) {
			t.Fatal("the hurry did not end once a new leader was known")
		}
		if rc := r.ReloadableConfig(); rc != s.normalTimeouts() {
			t.Errorf("config after the hurry %+v, want the configured %+v", rc, s.normalTimeouts())
		}
	})
}

// TestHurryEndsEarlyWhenAnotherSurvivorWinsAndRestores: a leader elected
// during step 1 ends the hurry, and the 1 ms lengthening is undone.
func TestHurryEndsEarlyWhenAnotherSurvivorWinsAndRestores(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, r, cancel := hurryServer(t, "b", refused)
		defer cancel()
		changes := make(chan raft.Observation, 1)
		done := runHurry(s, changes)
		synctest.Wait()
		r.set("a", r.LastContact())
		changes <- raft.Observation{}
		synctest.Wait()
		if !isDone(done) {
			t.Fatal("the hurry did not end when another survivor won")
		}
		if got := r.heartbeats(); len(got) != 2 || got[0] != stubLease+time.Millisecond || got[1] != stubLease {
			t.Errorf("reloads %v, want [%v %v]", got, stubLease+time.Millisecond, stubLease)
		}
		if rc := r.ReloadableConfig(); rc != s.normalTimeouts() {
			t.Errorf("config after the hurry %+v, want the configured %+v", rc, s.normalTimeouts())
		}
		if n := s.death.hurried.Load(); n != 0 {
			t.Errorf("hurried %d times, want 0", n)
		}
	})
}

// TestHurryStaggerExceedsTheHeartbeatSpread: the second survivor hurries
// a quarter lease after the first, more than the 0.2 lease by which the
// survivors' last contacts may differ (raft heartbeats each follower
// every 0.1–0.2 heartbeat timeouts).
func TestHurryStaggerExceedsTheHeartbeatSpread(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, r, cancel := hurryServer(t, "b", refused) // rank 1 of a, b
		defer cancel()
		changes := make(chan raft.Observation, 1)
		done := runHurry(s, changes)
		defer func() { cancel(); <-done }()
		time.Sleep(stubLease + stubLease/5)
		synctest.Wait()
		if n := len(r.heartbeats()); n != 1 {
			t.Fatalf("rank 1 hurried %v after the contact (%d reloads), within the heartbeat spread", stubLease+stubLease/5, n)
		}
		time.Sleep(stubLease/4 - stubLease/5 + time.Millisecond)
		synctest.Wait()
		if got := r.heartbeats(); len(got) != 2 || got[1] != stubLease {
			t.Fatalf("rank 1 a quarter lease after rank 0: reloads %v, want the hurry", got)
		}
	})
}

// TestHurryGivenUpWhenTheLeaderStillLeads: a false detection (the RPC
// port refused while raft lived) does not hold the watcher: once the
// leader's raft contacts this server again and a dial connects, the hurry
// ends, the timeouts are back and nothing is hurried.
func TestHurryGivenUpWhenTheLeaderStillLeads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, r, cancel := hurryServer(t, "a", connects)
		defer cancel()
		changes := make(chan raft.Observation, 1)
		done := runHurry(s, changes)
		defer func() { cancel(); <-done }()
		time.Sleep(stubLease / 2)
		r.set("dead", time.Now()) // a heartbeat from the "dead" leader
		changes <- raft.Observation{}
		synctest.Wait()
		if !isDone(done) {
			t.Fatal("the hurry still holds the watcher after the leader contacted this server and its address answered")
		}
		if n := s.death.abandoned.Load(); n != 1 {
			t.Errorf("abandoned %d, want 1", n)
		}
		if rc := r.ReloadableConfig(); rc != s.normalTimeouts() {
			t.Errorf("config %+v, want the configured %+v", rc, s.normalTimeouts())
		}
	})
}

// TestHurryKeepsWaitingWhileTheDialIsRefused: a leader shutting down
// gracefully still heartbeats a moment after its RPC server closed; while
// its address refuses, the hurry waits and fires a lease after the last
// heartbeat.
func TestHurryKeepsWaitingWhileTheDialIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, r, cancel := hurryServer(t, "a", refused)
		defer cancel()
		changes := make(chan raft.Observation, 1)
		done := runHurry(s, changes)
		defer func() { cancel(); <-done }()
		time.Sleep(stubLease / 2)
		last := time.Now()
		r.set("dead", last)
		changes <- raft.Observation{}
		synctest.Wait()
		if isDone(done) || s.death.abandoned.Load() != 0 {
			t.Fatal("the hurry was given up while the leader's address still refused")
		}
		time.Sleep(stubLease + time.Millisecond)
		synctest.Wait()
		if n := s.death.hurried.Load(); n != 1 {
			t.Errorf("hurried %d times a lease after the last heartbeat, want 1", n)
		}
	})
}
