package client

import (
	"fmt"
	"slices"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
)

// BenchmarkPlacedToRunning measures, per alloc, the client's share of
// `job run` → running: from the Watch answer that carries a new alloc to
// the ClientAllocs.Update that reports it running (alloc runner, hooks,
// task dirs, state DB writes, StartTask over go-plugin, the update).
// Reported as p50 and p99 in ms for raw_exec and mock.
func BenchmarkPlacedToRunning(b *testing.B) {
	for _, drv := range []string{"raw_exec", "mock"} {
		b.Run(drv, func(b *testing.B) {
			f := newFakeServer(b)
			n, err := startNode(b.TempDir(), f.addr, hclog.NewNullLogger(), true)
			if err != nil {
				b.Fatal(err)
			}
			defer n.stop()
			task := &pb.Task{Name: "t", Driver: drv, KillTimeoutMs: 1000}
			if drv == "raw_exec" {
				task.Config = sdk.ConfigMap{"command": sdk.StringValue("/bin/sleep"), "args": sdk.ListValue("600")}
			}
			j := mockJob(pb.JobType_JOB_TYPE_SERVICE, task)
			var lat []time.Duration
			b.ResetTimer()
			for i := range b.N {
				id := fmt.Sprintf("a%d", i)
				f.place(allocOf(id, j), j)
				var at time.Time
				for deadline := time.Now().Add(generous); at.IsZero(); time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						b.Fatalf("alloc %s never reported running", id)
					}
					at = f.firstStatusAt(id, pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING)
				}
				f.mu.Lock()
				lat = append(lat, at.Sub(f.answeredAt[id]))
				f.mu.Unlock()
				f.remove(id)
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[(len(lat)*99)/100].Microseconds())/1000, "p99-ms")
		})
	}
}
