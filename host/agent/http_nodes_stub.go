package agent

import "berth.dev/berth/rpc/pb"

// GET /v1/nodes?stub=true answers each node as a list stub, as Nomad's
// node list answers NodeListStubs: the node without the parts a list does
// not show and that make a node's answer large (~10 KiB a node, most of it
// the drivers' task config schemas). `berth node status` asks for stubs:
// the agent encodes a fifth of the bytes and the CLI decodes a fifth
// (issue 26). Left out, at their defaults: the fingerprint's attributes,
// each driver's attributes and task schema, the node's resources, meta and
// CSI plugins, and the secret hash (never in an answer anyway); in a stub
// they read empty, which does not mean the node has none (README, HTTP
// API). Everything else is the node's own value; GET /v1/node/{id} answers
// the whole node. An agent older than this ignores the parameter
// and answers whole nodes, which a reader of stubs reads the same.

// nodeStub returns n's list stub (n is not modified; the stub shares the
// parts it keeps with n).
func nodeStub(n *pb.Node) *pb.Node {
	s := &pb.Node{
		Id:                n.GetId(),
		Name:              n.GetName(),
		Status:            n.GetStatus(),
		StatusDescription: n.GetStatusDescription(),
		StatusUpdatedAt:   n.GetStatusUpdatedAt(),
		HttpAddr:          n.GetHttpAddr(),
		RegisteredAt:      n.GetRegisteredAt(),
		Eligibility:       n.GetEligibility(),
		Drain:             n.GetDrain(),
		Fenced:            n.GetFenced(),
		FencedAt:          n.GetFencedAt(),
		CreateIndex:       n.GetCreateIndex(),
		ModifyIndex:       n.GetModifyIndex(),
		HostVolumes:       n.GetHostVolumes(),
		Readmitted:        n.GetReadmitted(),
		HasSecret:         n.GetHasSecret(),
	}
	if fp := n.GetFingerprint(); fp != nil {
		s.Fingerprint = &pb.NodeFingerprint{
			Hostname:     fp.GetHostname(),
			Os:           fp.GetOs(),
			Arch:         fp.GetArch(),
			CpuCores:     fp.GetCpuCores(),
			MemoryBytes:  fp.GetMemoryBytes(),
			BerthVersion: fp.GetBerthVersion(),
			CpuTotalMhz:  fp.GetCpuTotalMhz(),
		}
	}
	if ds := n.GetDrivers(); ds != nil {
		s.Drivers = make(map[string]*pb.DriverInfo, len(ds))
		for name, d := range ds {
			s.Drivers[name] = driverStub(d)
		}
	}
	return s
}

func driverStub(d *pb.DriverInfo) *pb.DriverInfo {
	if d == nil {
		return nil
	}
	return &pb.DriverInfo{
		Name:              d.GetName(),
		Detected:          d.GetDetected(),
		Healthy:           d.GetHealthy(),
		HealthDescription: d.GetHealthDescription(),
		Version:           d.GetVersion(),
		Builtin:           d.GetBuiltin(),
		Path:              d.GetPath(),
		UpdatedAt:         d.GetUpdatedAt(),
		MountVolumes:      d.GetMountVolumes(),
	}
}

// nodeStubs returns the stubs of ns.
func nodeStubs(ns []*pb.Node) []*pb.Node {
	out := make([]*pb.Node, len(ns))
	for i, n := range ns {
		out[i] = nodeStub(n)
	}
	return out
}
