package main

import (
	"fmt"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// restoreState is the state the restore section restores: what nodesim
// leaves at its largest run, built through the FSM without simulating a
// node. nodes are registered as a dev agent registers (the captured
// dev-node.json) with nodesim's CSI node plugin and topology; one job of
// allocs allocs is placed over them by plans split by whole nodes, the
// first claims allocs holding a write claim on a volume of their own, and
// every alloc is reported running with a task's states.
type restoreState struct {
	nodes, allocs, claims int
}

// issue25State is issue 25's largest state: 10,000 nodes running the
// 10,000-alloc job, beside 1,000 claimed volumes.
var issue25State = restoreState{nodes: 10_000, allocs: 10_000, claims: 1_000}

// restorePlugin names the CSI node plugins the nodes serve: nodesim's,
// with no controller, so a claim is ready at once. nodesim's nodes all
// serve one plugin; here they are spread over restorePlugins plugins of
// the same kind, as the state machine's apply of a node's plugin update
// copies the plugin's row with every instance (building one row of 10,000
// instances takes quadratic time: ~11 s for 1,000 nodes). The snapshot
// holds the same instances either way.
const (
	restorePlugin  = "sim.csi"
	restorePlugins = 100
)

func (rs restoreState) build() (*builtState, error) {
	captured, err := devNode()
	if err != nil {
		return nil, err
	}
	a := &applier{f: fsm.New(hclog.NewNullLogger())}
	nodeID := func(i int) string { return fmt.Sprintf("%08x-0000-4000-8000-%012x", i*7919, i) }
	for i := range rs.nodes {
		n := proto.Clone(captured).(*pb.Node)
		n.Id, n.Name = nodeID(i), fmt.Sprintf("sim-%05d", i)
		n.Fingerprint.Hostname = n.Name
		n.Meta = map[string]string{"nodesim": "true"}
		n.Resources = &pb.NodeResources{CpuMhz: 1 << 20, MemoryMb: 1 << 20}
		if err := a.add(fsm.NodeRegister, &pb.NodeRegisterCommand{Node: n}); err != nil {
			return nil, err
		}
		plugin := fmt.Sprintf("%s-%02d", restorePlugin, i%restorePlugins)
		if err := a.add(fsm.NodeCSIUpdate, &pb.NodeCSIUpdateCommand{NodeId: n.Id, UpdatedAt: n.RegisteredAt,
			Nodes: map[string]*pb.CSIPluginInfo{plugin: {
				PluginId: plugin, Type: pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE, Healthy: true,
				HealthDescription: "healthy", Provider: restorePlugin, ProviderVersion: "0.1.0",
				NodeInfo: &pb.CSINodeInfo{Id: n.Id, RequiresNodeStageVolume: true,
					AccessibleTopology: map[string]string{"zone": fmt.Sprintf("zone-%d", i%4)}},
			}}}); err != nil {
			return nil, err
		}
	}
	const job = "sim-job"
	if err := a.add(fsm.JobRegister, &pb.JobRegisterCommand{Job: &pb.Job{Id: job, Name: job,
		Type: pb.JobType_JOB_TYPE_SERVICE, Priority: 50, Groups: []*pb.TaskGroup{{Name: "g", Count: int32(rs.allocs),
			Tasks: []*pb.Task{{Name: "t", Driver: "mock", Resources: &pb.TaskResources{CpuMhz: 100, MemoryMb: 128}}}}}}}); err != nil {
		return nil, err
	}
	for v := range rs.claims {
		if err := a.add(fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: restoreVolume(v)}); err != nil {
			return nil, err
		}
	}
	allocID := func(k int) string { return fmt.Sprintf("a11%05x-0000-4000-8000-%012x", k, k) }
	// Plans of 100 nodes' allocs, as the worker splits a large plan.
	const perPlan = 100
	for start := 0; start < rs.allocs; start += perPlan {
		plan := &pb.Plan{EvalId: fmt.Sprintf("eval-%06d", start), JobId: job}
		for k := start; k < min(start+perPlan, rs.allocs); k++ {
			al := benchVolumeAlloc(allocID(k), job, k, nodeID(k%rs.nodes))
			al.EvalId = plan.EvalId
			plan.Allocs = append(plan.Allocs, al)
			if k < rs.claims {
				plan.Claims = append(plan.Claims, writeClaim("claim-"+al.Id, fmt.Sprintf("vol-%05d", k), al.Id, snwMode))
			}
		}
		if err := a.add(fsm.PlanApply, &pb.PlanApplyCommand{Plan: plan, AppliedAt: 1_795_283_680_000_000_000}); err != nil {
			return nil, err
		}
	}
	for k := range rs.allocs {
		at := int64(1_795_283_690_000_000_000)
		if err := a.add(fsm.AllocClientUpdate, &pb.AllocClientUpdateCommand{NodeId: nodeID(k % rs.nodes), Updates: []*pb.AllocClientUpdate{{
			AllocId: allocID(k), ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING,
			ClientDescription: "Tasks are running", UpdatedAt: at,
			TaskStates: map[string]*pb.TaskState{"t": {State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING, StartedAt: at,
				Events: []*pb.TaskEvent{
					{Type: "Received", OccurredAt: at - 2e9, Message: "Task received by client"},
					{Type: "Task Setup", OccurredAt: at - 1e9, Message: "Building Task Directory"},
					{Type: "Started", OccurredAt: at, Message: "Task started by client"},
				}}},
		}}}); err != nil {
			return nil, err
		}
	}
	if err := a.flush(); err != nil {
		return nil, err
	}
	snap, err := snapshotFSM(a.f)
	if err != nil {
		return nil, err
	}
	return &builtState{snapshot: snap, index: a.index, allocs: rs.allocs, claims: rs.claims, volumes: rs.claims, nodes: rs.nodes}, nil
}

func restoreVolume(v int) *pb.Volume {
	vol := benchVolume(fmt.Sprintf("vol-%05d", v), snwMode)
	vol.PluginId = fmt.Sprintf("%s-%02d", restorePlugin, v%restorePlugins)
	return vol
}
