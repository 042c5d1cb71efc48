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
