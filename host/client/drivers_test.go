package client

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

func TestClientRegistersAgainWhenDriversChange(t *testing.T) {
	s := startServer(t)
	var mu sync.Mutex
	healthy := true
	changed := make(chan struct{}, 1)
	c, err := New(Config{
		DataDir: t.TempDir(),
		Servers: []string{serverRPC(t, s)},
		Logger:  testutil.Logger(t),
		Drivers: func() map[string]*pb.DriverInfo {
			mu.Lock()
			defer mu.Unlock()
			return map[string]*pb.DriverInfo{"mock": {Name: "mock", Detected: true, Healthy: healthy}}
		},
		DriversChanged: changed,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	n := waitStatus(t, s, c.NodeID(), pb.NodeStatus_NODE_STATUS_READY)
	if !n.GetDrivers()["mock"].GetHealthy() {
		t.Fatalf("registered node: %v", n)
	}

	mu.Lock()
	healthy = false
	mu.Unlock()
	changed <- struct{}{}
	testutil.WaitFor(t, 15*time.Second, func() error {
		n, err := s.State().NodeByID(nil, c.NodeID())
		if err != nil {
			return err
		}
		if n.GetDrivers()["mock"].GetHealthy() {
			return fmt.Errorf("servers still see mock healthy: %v", n.GetDrivers())
		}
		return nil
	})
}

// A fingerprint change does not make the node unregistered while it
// registers again, even when that takes long (here: the servers are gone,
// so the new registration cannot succeed). Before, the node read as
// unregistered until the servers took the new fingerprint.
func TestFingerprintChangeKeepsTheNodeRegistered(t *testing.T) {
	s := startServer(t)
	changed := make(chan struct{}, 1)
	c, err := New(Config{
		DataDir:        t.TempDir(),
		Servers:        []string{serverRPC(t, s)},
		Logger:         testutil.Logger(t),
		Drivers:        func() map[string]*pb.DriverInfo { return nil },
		DriversChanged: changed,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	waitStatus(t, s, c.NodeID(), pb.NodeStatus_NODE_STATUS_READY)
	if err := s.Shutdown(); err != nil {
		t.Fatal(err)
	}
	changed <- struct{}{}
	testutil.WaitFor(t, 15*time.Second, func() error {
		if len(changed) != 0 {
			return fmt.Errorf("the client has not taken the change yet")
		}
		return nil
	})
	// The registration that follows fails and is retried no sooner than
	// minRetry later; the node must read as registered throughout.
	for end := time.Now().Add(2 * minRetry); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if !c.Registered() {
			t.Fatal("a fingerprint change made the node unregistered")
		}
	}
}
