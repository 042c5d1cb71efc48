package schedtest

import (
	"fmt"

	"berth.dev/berth/rpc/pb"
)

// Node returns a ready, eligible node with the raw_exec and mock drivers
// healthy, 4000 MHz and 8192 MB free, linux/amd64.
func Node(id string) *pb.Node {
	return &pb.Node{
		Id:          id,
		Name:        "name-" + id,
		Status:      pb.NodeStatus_NODE_STATUS_READY,
		Eligibility: pb.NodeEligibility_NODE_ELIGIBILITY_ELIGIBLE,
		Fingerprint: &pb.NodeFingerprint{
			Hostname:   "host-" + id,
			Os:         "linux",
			Arch:       "amd64",
			CpuCores:   4,
			Attributes: map[string]string{"kernel.version": "6.1.0"},
		},
		Drivers: map[string]*pb.DriverInfo{
			"raw_exec": {Name: "raw_exec", Detected: true, Healthy: true, Version: "1.0.0"},
			"mock":     {Name: "mock", Detected: true, Healthy: true, Version: "1.0.0"},
		},
		Resources: &pb.NodeResources{CpuMhz: 4000, MemoryMb: 8192},
		Meta:      map[string]string{},
	}
}

// Job returns a job of type typ with one group "web" of count tasks
// "task" (driver mock, 500 MHz, 256 MB).
func Job(id string, typ pb.JobType, count int32) *pb.Job {
	return &pb.Job{
		Id:       id,
		Name:     id,
		Type:     typ,
		Priority: 50,
		Groups: []*pb.TaskGroup{{
			Name:  "web",
			Count: count,
			Tasks: []*pb.Task{{
				Name:      "task",
				Driver:    "mock",
				Resources: &pb.TaskResources{CpuMhz: 500, MemoryMb: 256},
			}},
		}},
	}
}

// Eval returns a pending job-register evaluation for job.
func Eval(id string, job *pb.Job) *pb.Evaluation {
	return &pb.Evaluation{
		Id:          id,
		Priority:    job.GetPriority(),
		Type:        job.GetType(),
		TriggeredBy: pb.EvalTrigger_EVAL_TRIGGER_JOB_REGISTER,
		JobId:       job.GetId(),
		Status:      pb.EvalStatus_EVAL_STATUS_PENDING,
	}
}

// Alloc returns a running alloc of job's group "web" at index on node,
// with the group's resources.
func Alloc(id string, job *pb.Job, index int32, node string) *pb.Allocation {
	tg := job.GetGroups()[0]
	var cpu, mem int64
	tasks := map[string]*pb.TaskResources{}
	for _, t := range tg.GetTasks() {
		cpu += t.GetResources().GetCpuMhz()
		mem += t.GetResources().GetMemoryMb()
		tasks[t.GetName()] = &pb.TaskResources{CpuMhz: t.GetResources().GetCpuMhz(), MemoryMb: t.GetResources().GetMemoryMb()}
	}
	return &pb.Allocation{
		Id:            id,
		Name:          fmt.Sprintf("%s.%s[%d]", job.GetId(), tg.GetName(), index),
		Index:         index,
		NodeId:        node,
		NodeName:      "name-" + node,
		JobId:         job.GetId(),
		JobVersion:    job.GetVersion(),
		TaskGroup:     tg.GetName(),
		Resources:     &pb.AllocResources{CpuMhz: cpu, MemoryMb: mem, Tasks: tasks},
		DesiredStatus: pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_RUN,
		ClientStatus:  pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING,
	}
}

// Cluster returns a state with nodes nodes ("node-0000", ...) of
// cpuMHz/memoryMB each and a service job "bench" of count allocs of
// 100 MHz and 128 MB, with its register eval: the input of the scheduler
// throughput benchmark (make bench and BenchmarkPlace5000On1000).
func Cluster(nodes int, count int32, cpuMHz, memoryMB int64) (*State, *pb.Evaluation) {
	st := NewState()
	for i := 0; i < nodes; i++ {
		n := Node(fmt.Sprintf("node-%04d", i))
		n.Resources = &pb.NodeResources{CpuMhz: cpuMHz, MemoryMb: memoryMB}
		st.AddNode(n)
	}
	job := Job("bench", pb.JobType_JOB_TYPE_SERVICE, count)
	job.Groups[0].Tasks[0].Resources = &pb.TaskResources{CpuMhz: 100, MemoryMb: 128}
	st.AddJob(job)
	return st, Eval("bench-eval", job)
}

// Volume returns a registered, schedulable volume of plugin offering
// access mode mode with a file system, that needs no controller publish.
func Volume(id, plugin string, mode pb.VolumeAccessMode) *pb.Volume {
	return &pb.Volume{
		Id:       id,
		Name:     id,
		PluginId: plugin,
		Capabilities: []*pb.VolumeCapability{{
			AccessMode:     mode,
			AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM,
		}},
		Schedulable: true,
	}
}

// WithNodePlugin gives n a healthy node instance of plugin (no volume
// limit, no topology) and returns n.
func WithNodePlugin(n *pb.Node, plugin string) *pb.Node {
	if n.CsiNodePlugins == nil {
		n.CsiNodePlugins = map[string]*pb.CSIPluginInfo{}
	}
	n.CsiNodePlugins[plugin] = &pb.CSIPluginInfo{
		PluginId: plugin,
		Type:     pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE,
		Healthy:  true,
		NodeInfo: &pb.CSINodeInfo{Id: n.GetId()},
	}
	return n
}

// WithVolume adds a CSI volume request named name for source to every
// group of job and returns job.
func WithVolume(job *pb.Job, name, source string) *pb.Job {
	for _, g := range job.GetGroups() {
		if g.Volumes == nil {
			g.Volumes = map[string]*pb.VolumeRequest{}
		}
		g.Volumes[name] = &pb.VolumeRequest{Name: name, Type: "csi", Source: source}
	}
	return job
}

// Claim returns a ready write claim of alloc a on volume with access mode
// mode (file system), on a's node.
func Claim(id, volume string, a *pb.Allocation, mode pb.VolumeAccessMode) *pb.Claim {
	return &pb.Claim{
		Id:             id,
		VolumeId:       volume,
		AllocId:        a.GetId(),
		NodeId:         a.GetNodeId(),
		Mode:           pb.ClaimMode_CLAIM_MODE_WRITE,
		AccessMode:     mode,
		AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM,
		State:          pb.ClaimState_CLAIM_STATE_READY,
	}
}
