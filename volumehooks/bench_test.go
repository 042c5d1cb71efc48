package volumehooks

import (
	"context"
	"slices"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/csi/registry"
	"berth.dev/berth/internal/runhooks"
	"berth.dev/berth/rpc/pb"
)

// BenchmarkListenToRegistered measures, per plugin start, the time from
// the plugin listening on its socket (some time after its task started)
// to its entry in the registry, with the default start cadence. Reported
// as p50 and max ms over b.N starts.
func BenchmarkListenToRegistered(b *testing.B) {
	var lat []time.Duration
	for i := 0; i < b.N; i++ {
		dataDir := shortDir(b)
		reg := registry.New(newMemStore())
		ctx, cancel := context.WithCancel(context.Background())
		events := reg.Subscribe(ctx)
		e := &env{t: b, dataDir: dataDir, reg: reg, events: &eventLog{}, life: &fakeLifecycle{}}
		e.build(pluginTask("node", time.Minute), func(c *SupervisorConfig) {
			c.Logger = hclog.NewNullLogger()
			c.HealthInterval, c.StartProbeInterval, c.MaxStartProbeInterval = DefaultHealthInterval, DefaultStartProbeInterval, DefaultMaxStartProbeInterval
		})
		if _, err := e.prestart(false); err != nil {
			b.Fatal(err)
		}
		if err := e.hook.Poststart(ctx, &runhooks.PoststartRequest{TaskInfo: e.info, TaskID: "attempt"}); err != nil {
			b.Fatal(err)
		}
		// The plugin takes a while to come up, as a real one does.
		time.Sleep(time.Duration(30+i%7*11) * time.Millisecond)
		srv, err := csifake.New().Listen(PluginSocket(dataDir, allocID, "plugin"))
		if err != nil {
			b.Fatal(err)
		}
		listening := time.Now()
		for ev := range events {
			if ev.Kind == registry.EventRegistered && ev.Entry.Registration.GetType() == pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE {
				break
			}
		}
		lat = append(lat, time.Since(listening))
		_ = e.hook.Stop(context.Background(), nil)
		cancel()
		srv.Stop()
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
}
