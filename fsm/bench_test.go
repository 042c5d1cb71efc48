package fsm_test

import (
	"fmt"
	"testing"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// fullNode is a deliberately heavy synthetic node, far larger than what a
// client registers today: 30 fingerprint attributes and ten drivers with
// eight attributes each.
func fullNode(id string) *pb.Node {
	attrs := map[string]string{}
	for i := range 30 {
		attrs[fmt.Sprintf("unique.platform.attr%02d", i)] = fmt.Sprintf("value-%d-of-a-realistic-length", i)
	}
	drivers := map[string]*pb.DriverInfo{}
	for i := range 10 {
		name := fmt.Sprintf("driver%d", i)
		dattrs := map[string]string{}
		for j := range 8 {
			dattrs[fmt.Sprintf("driver.%s.attr%d", name, j)] = fmt.Sprintf("v%d.%d.0", i, j)
		}
		drivers[name] = &pb.DriverInfo{
			Name:              name,
			Detected:          true,
			Healthy:           i%3 != 0,
			HealthDescription: "healthy",
			Version:           "1.2.3",
			Builtin:           i < 2,
			Path:              "/opt/berth/plugins/" + name,
			Attributes:        dattrs,
			UpdatedAt:         1_700_000_000_000_000_000,
		}
	}
	return &pb.Node{
		Id:              id,
		Name:            "client-" + id,
		Status:          pb.NodeStatus_NODE_STATUS_READY,
		StatusUpdatedAt: 1_700_000_000_000_000_000,
		HttpAddr:        "10.0.0.12:4646",
		RegisteredAt:    1_700_000_000_000_000_000,
		Fingerprint: &pb.NodeFingerprint{
			Hostname:     "host-" + id,
			Os:           "linux",
			Arch:         "amd64",
			CpuCores:     32,
			MemoryBytes:  128 << 30,
			BerthVersion: "0.1.0",
			Attributes:   attrs,
		},
		Drivers: drivers,
	}
}

// BenchmarkApplyNodeRegister applies full-fingerprint registrations, the
// heaviest command today, cycling through 1000 nodes so most are
// re-registrations into a populated table (lookup, keep create index,
// replace, bump the table index).
func BenchmarkApplyNodeRegister(b *testing.B) {
	const nodes = 1000
	entries := make([][]byte, nodes)
	for i := range entries {
		entries[i] = mustEncode(b, fsm.NodeRegister, &pb.NodeRegisterCommand{Node: fullNode(fmt.Sprintf("node-%04d", i))})
	}
	b.SetBytes(int64(len(entries[0])))
	f := fsm.New(nil)
	index := uint64(0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		index++
		if res := applyAt(f, index, entries[i%nodes]); res.Err != nil {
			b.Fatal(res.Err)
		}
	}
}

// BenchmarkApplyNodeStatusUpdate alternates a node between ready and down:
// the heartbeat-loss path, a clone of a full node each time.
func BenchmarkApplyNodeStatusUpdate(b *testing.B) {
	f := fsm.New(nil)
	applyAt(f, 1, mustEncode(b, fsm.NodeRegister, &pb.NodeRegisterCommand{Node: fullNode("n1")}))
	var entries [2][]byte
	for i, s := range []pb.NodeStatus{pb.NodeStatus_NODE_STATUS_DOWN, pb.NodeStatus_NODE_STATUS_READY} {
		entries[i] = mustEncode(b, fsm.NodeStatusUpdate, &pb.NodeStatusUpdateCommand{NodeId: "n1", Status: s, UpdatedAt: 1})
	}
	index := uint64(1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		index++
		if res := applyAt(f, index, entries[i%2]); res.Err != nil {
			b.Fatal(res.Err)
		}
	}
}

// BenchmarkSnapshotRestore persists and restores 10,000 full nodes.
func BenchmarkSnapshotRestore(b *testing.B) {
	f := fsm.New(nil)
	for i := range 10_000 {
		cmd := &pb.NodeRegisterCommand{Node: fullNode(fmt.Sprintf("node-%05d", i))}
		if res := applyAt(f, uint64(i+1), mustEncode(b, fsm.NodeRegister, cmd)); res.Err != nil {
			b.Fatal(res.Err)
		}
	}
	b.Run("persist", func(b *testing.B) {
		var size int
		for range b.N {
			size = len(snapshotBytes(b, f))
		}
		b.SetBytes(int64(size))
	})
	b.Run("restore", func(b *testing.B) {
		snap := snapshotBytes(b, f)
		b.SetBytes(int64(len(snap)))
		target := fsm.New(nil)
		b.ResetTimer()
		for range b.N {
			if err := restoreBytes(target, snap); err != nil {
				b.Fatal(err)
			}
		}
	})
}
