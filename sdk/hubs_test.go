package sdk

import (
	"context"
	"errors"
	"testing"
	"time"

	"berth.dev/berth/sdk/driverpb"
)

func TestEventHubFansOutAndReleases(t *testing.T) {
	var h EventHub
	ctx1, cancel1 := context.WithCancel(context.Background())
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	s1, s2 := h.Subscribe(ctx1), h.Subscribe(ctx2)
	h.Emit("a", "one", nil)
	for _, s := range []func(func(*driverpb.TaskEvent, error) bool){s1, s2} {
		for ev, err := range s {
			if err != nil || ev.GetMessage() != "one" {
				t.Errorf("got %v, %v", ev, err)
			}
			break
		}
	}
	cancel1()
	// The cancelled subscriber is released; publishing does not block on it.
	for range eventBuffer + 10 {
		h.Emit("a", "flood", nil)
	}
	// Release runs asynchronously (context.AfterFunc).
	deadline := time.Now().Add(time.Minute)
	for {
		h.mu.Lock()
		n := len(h.subs)
		h.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d subscribers, want 1 after a cancel", n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestFingerprintHubSkipsUnchanged(t *testing.T) {
	h := NewFingerprintHub(&driverpb.DriverFingerprint{Health: driverpb.Health_HEALTH_HEALTHY})
	h.mu.Lock()
	before := h.changed
	h.mu.Unlock()
	h.Set(&driverpb.DriverFingerprint{Health: driverpb.Health_HEALTH_HEALTHY})
	h.mu.Lock()
	same := h.changed == before
	h.mu.Unlock()
	if !same {
		t.Error("setting an equal fingerprint woke watchers")
	}
	cur := h.Current()
	cur.Health = driverpb.Health_HEALTH_UNHEALTHY
	if h.Current().GetHealth() != driverpb.Health_HEALTH_HEALTHY {
		t.Error("Current returned the hub's own message")
	}
}

func TestTaskStore(t *testing.T) {
	var s TaskStore[int]
	if err := s.Add("a", 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Add("a", 2); !errors.Is(err, ErrTaskExists) {
		t.Errorf("duplicate Add = %v", err)
	}
	if v, added := s.AddIfAbsent("a", 3); added || v != 1 {
		t.Errorf("AddIfAbsent on a taken id = %d, %v", v, added)
	}
	if _, err := s.Get("b"); !errors.Is(err, ErrTaskNotFound) {
		t.Errorf("Get unknown = %v", err)
	}
	s.AddIfAbsent("b", 4)
	if ids := s.IDs(); len(ids) != 2 || ids[0] != "a" || ids[1] != "b" {
		t.Errorf("IDs %v", ids)
	}
	s.Delete("a")
	s.Delete("zzz")
	if _, err := s.Get("a"); !errors.Is(err, ErrTaskNotFound) {
		t.Errorf("Get after Delete = %v", err)
	}
}
