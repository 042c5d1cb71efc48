package client

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/rpc/tunnel"
)

// Alloc runners take the node's attributes from the node as last
// registered: placing allocs does not fingerprint the host again for each
// (at 10,000 nodes, nodesim found a tenth of a starting node's CPU spent
// re-reading /proc/meminfo, /proc/cpuinfo and the hostname per alloc).
func TestRunnersUseTheRegisteredNode(t *testing.T) {
	var calls atomic.Int64
	orig := hostFingerprint
	hostFingerprint = func() *pb.NodeFingerprint {
		calls.Add(1)
		return orig()
	}
	t.Cleanup(func() { hostFingerprint = orig })

	f := newFakeServer(t)
	n := newNode(t, t.TempDir(), f.addr, true)
	j := mockJob(pb.JobType_JOB_TYPE_SERVICE, &pb.Task{Name: "web", Driver: "mock", KillTimeoutMs: 1000})
	f.place(allocOf("first", j), j)
	waitReported(t, f, "first", status_(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING))
	before := calls.Load()
	const more = 10
	for i := range more {
		f.place(allocOf(fmt.Sprintf("a%d", i), j), j)
	}
	for i := range more {
		waitReported(t, f, fmt.Sprintf("a%d", i), status_(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING))
	}
	// A re-registration meanwhile (a driver's health settling) may
	// fingerprint once or twice; one per alloc is what must not happen.
	if grew := calls.Load() - before; grew >= more {
		t.Fatalf("the host was fingerprinted %d times for %d allocs", grew, more)
	}
	if _, err := n.c.runner("a0"); err != nil {
		t.Fatal(err)
	}
}

// The node's tunnel pings no more often than a third of the TTL the
// servers told it (which grows with the cluster); a test's keepalive is
// kept as given.
func TestTunnelKeepaliveFollowsTheTTL(t *testing.T) {
	c := &Client{ttl: 600 * time.Second}
	if got := c.tunnelKeepalive().AtLeast(); got != 200*time.Second {
		t.Fatalf("tunnel pings at least every %s, want 200s", got)
	}
	c.cfg.tunnelKeepalive = tunnel.Keepalive{Interval: time.Second}
	if k := c.tunnelKeepalive(); k.AtLeast != nil || k.Interval != time.Second {
		t.Fatalf("a test's keepalive was changed: %+v", k)
	}
}
