package fsm_test

import (
	"fmt"
	"testing"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// BenchmarkApplyNodeCSIUpdate applies NodeCSIUpdate for nodes of a cluster
// where every node runs an instance of one plugin (3 also a controller),
// each update turning its node's instance's health, so every apply
// changes the plugin: at 100, 1,000 and 5,000 nodes, with the servers
// below pluginInstancesSince (inline: the row holds every instance) and at
// it (split). Issue 25: inline, each apply costs O(nodes).
func BenchmarkApplyNodeCSIUpdate(b *testing.B) {
	for _, form := range []struct{ name, version string }{{"inline", "0.1.0-dev.3"}, {"split", "0.1.0-dev.4"}} {
		for _, nodes := range []int{100, 1000, 5000} {
			b.Run(fmt.Sprintf("%s/nodes=%d", form.name, nodes), func(b *testing.B) {
				f := fsm.New(nil)
				index := uint64(1)
				applyOK(b, f, index, fsm.ServerUpsert, &pb.ServerUpsertCommand{Server: &pb.ServerMember{Id: "s1", Version: form.version}})
				entries := make([][2][]byte, nodes)
				for i := range nodes {
					id := fmt.Sprintf("node-%05d", i)
					index++
					applyOK(b, f, index, fsm.NodeRegister, registerCmd(id, id, pb.NodeStatus_NODE_STATUS_READY))
					for h := range 2 {
						entries[i][h] = mustEncode(b, fsm.NodeCSIUpdate, pluginCmd(id, "p", i < 3, h == 0, int64(h+1)))
					}
					index++
					if res := applyAt(f, index, entries[i][0]); res.Err != nil {
						b.Fatal(res.Err)
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					index++
					if res := applyAt(f, index, entries[i%nodes][(i/nodes+1)%2]); res.Err != nil {
						b.Fatal(res.Err)
					}
				}
			})
		}
	}
}
