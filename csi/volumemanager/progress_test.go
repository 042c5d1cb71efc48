package volumemanager

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/internal/testutil"
)

// steps records what a Progress is told.
type steps struct {
	mu  sync.Mutex
	got []string
	at  []time.Time
}

func (s *steps) progress(step Step, at time.Time, path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, fmt.Sprintf("%s %s", step, path))
	s.at = append(s.at, at)
}

// take returns what was told since the last take.
func (s *steps) take() ([]string, []time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	got, at := s.got, s.at
	s.got, s.at = nil, nil
	return got, at
}

// tickingClock advances a millisecond on every reading, so a step's time
// shows which reading it was.
type tickingClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *tickingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(time.Millisecond)
	return c.now
}

// Progress is told each node call a Publish or an Unpublish completed,
// when it completed, with the path it concerns — and nothing for a call
// not made (staged already, published already, another user left) or a
// call that failed.
func TestProgressTellsEachCompletedCall(t *testing.T) {
	h := newHarness(t)
	clock := &tickingClock{now: time.Unix(1_000, 0)}
	m, err := New(Config{DataDir: h.dir, NodeID: nodeID, Store: h.store, Plugins: h.plugins, Logger: testutil.Logger(t), Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s := &steps{}
	staging := StagingPath(h.dir, "hostpath", "v1")
	pub := func(user string) string { return PublishPath(h.dir, user, "v1") }
	check := func(what string, want ...string) []time.Time {
		t.Helper()
		got, at := s.take()
		if !slices.Equal(got, want) {
			t.Errorf("%s: progress told %q, want %q", what, got, want)
		}
		if !slices.IsSortedFunc(at, func(a, b time.Time) int { return a.Compare(b) }) {
			t.Errorf("%s: step times %v out of order", what, at)
		}
		return at
	}

	before := clock.Now()
	req := request("v1", "a1")
	req.Progress = s.progress
	if _, err := m.Publish(ctx, req); err != nil {
		t.Fatal(err)
	}
	at := check("first publish", "staged "+staging, "published "+pub("a1"))
	after := clock.Now()
	for _, a := range at {
		// Stamped by the manager's clock while the call ran.
		if !a.After(before) || !a.Before(after) {
			t.Errorf("step time %v not between the publish's start %v and end %v", a, before, after)
		}
	}
	if len(at) == 2 && !at[0].Before(at[1]) {
		t.Errorf("staged at %v, published at %v: want staged first", at[0], at[1])
	}
	if _, err := m.Publish(ctx, req); err != nil {
		t.Fatal(err)
	}
	check("publish of a published use")

	req2 := request("v1", "a2")
	req2.Progress = s.progress
	if _, err := m.Publish(ctx, req2); err != nil {
		t.Fatal(err)
	}
	check("second user's publish (staged already)", "published "+pub("a2"))

	if err := m.Unpublish(ctx, "a1", "v1", s.progress); err != nil {
		t.Fatal(err)
	}
	check("unpublish with a user left", "unpublished "+pub("a1"))
	if err := m.Unpublish(ctx, "a2", "v1", s.progress); err != nil {
		t.Fatal(err)
	}
	check("last user's unpublish", "unpublished "+pub("a2"), "unstaged "+staging)
	if err := m.Unpublish(ctx, "a2", "v1", s.progress); err != nil {
		t.Fatal(err)
	}
	check("unpublish of a use that is gone")

	// A failed publish tells the stage it finished, not the publish.
	h.plugin.NodePublishVolume.Next(nil, status.Error(codes.InvalidArgument, "bad mount flag"))
	req3 := request("v1", "a3")
	req3.Progress = s.progress
	if _, err := m.Publish(ctx, req3); err == nil {
		t.Fatal("publish succeeded through a final error")
	}
	check("failed publish", "staged "+staging)
	// A failed unpublish tells nothing; the next one both steps.
	h.plugin.NodeUnpublishVolume.Next(nil, status.Error(codes.InvalidArgument, "busy"))
	if err := m.Unpublish(ctx, "a3", "v1", s.progress); err == nil {
		t.Fatal("unpublish succeeded through a final error")
	}
	check("failed unpublish")
	if err := m.Unpublish(ctx, "a3", "v1", s.progress); err != nil {
		t.Fatal(err)
	}
	check("unpublish after a failed one", "unpublished "+pub("a3"), "unstaged "+staging)
}

// A plugin without STAGE_UNSTAGE: only the publish and the unpublish are
// told.
func TestProgressWithoutStaging(t *testing.T) {
	h := newHarness(t)
	h.plugins.stage = false
	m := h.manager(t)
	s := &steps{}
	req := request("v1", "a1")
	req.Progress = s.progress
	if _, err := m.Publish(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if err := m.Unpublish(context.Background(), "a1", "v1", s.progress); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(h.dir, "csi", "publish", "a1", "v1")
	if got, _ := s.take(); !slices.Equal(got, []string{"published " + path, "unpublished " + path}) {
		t.Errorf("progress told %q, want the publish and the unpublish of %s", got, path)
	}
}
