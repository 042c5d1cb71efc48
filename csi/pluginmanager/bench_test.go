package pluginmanager

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/csi/registry"
)

// BenchmarkRegisterToSent measures the manager's share of "plugin task
// healthy → schedulable on the servers": from registry.Register of a new
// plugin instance (what the supervisor hook does once Probe said ready) to
// the Sender being called with a set holding it healthy — the subscription
// event, the dial, the fingerprint's six calls over the unix socket and
// the set's build. Reported as p50 and p99 in ms.
func BenchmarkRegisterToSent(b *testing.B) {
	srv := servePlugin(b, csifake.New())
	reg := registry.New(newMemStore())
	var (
		mu     sync.Mutex
		want   string
		seenAt time.Time
		seen   = make(chan struct{}, 1)
	)
	send := func(_ context.Context, set Set) error {
		mu.Lock()
		defer mu.Unlock()
		if i := set.Nodes["p"]; want != "" && i.GetAllocId() == want && i.GetHealthy() && seenAt.IsZero() {
			seenAt = time.Now()
			seen <- struct{}{}
		}
		return nil
	}
	m, err := New(Config{Registry: reg, Send: send})
	if err != nil {
		b.Fatal(err)
	}
	m.Start()
	defer m.Stop()
	var lat []time.Duration
	b.ResetTimer()
	for i := range b.N {
		alloc := fmt.Sprintf("a%d", i)
		mu.Lock()
		want, seenAt = alloc, time.Time{}
		mu.Unlock()
		start := time.Now()
		if err := reg.Register(registration(node, "p", alloc, srv.Endpoint, uint64(i+1))); err != nil {
			b.Fatal(err)
		}
		select {
		case <-seen:
		case <-time.After(waitLimit):
			b.Fatalf("alloc %s never sent", alloc)
		}
		mu.Lock()
		lat = append(lat, seenAt.Sub(start))
		mu.Unlock()
		if err := reg.Deregister(alloc, "p"); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[(len(lat)*99)/100].Microseconds())/1000, "p99-ms")
}
