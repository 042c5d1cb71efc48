package testutil

import (
	"fmt"

	"berth.dev/berth/rpc/pb"
)

// HeavyNode is a deliberately heavy synthetic node, far larger than what a
// client registers today: 30 fingerprint attributes and ten drivers with
// eight attributes each, about 5 KB encoded. The FSM benchmarks and the raft
// benchmark's stress payload share it, so their figures agree.
func HeavyNode(id string) *pb.Node {
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
