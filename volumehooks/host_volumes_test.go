package volumehooks

import (
	"context"
	"errors"
	"strings"
	"testing"

	"berth.dev/berth/internal/runhooks"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

func hostVolumeGroup(task *pb.Task) *pb.TaskGroup {
	return &pb.TaskGroup{Name: "g", Tasks: []*pb.Task{task}, Volumes: map[string]*pb.VolumeRequest{
		"scratch": {Name: "scratch", Type: "host", Source: "fast"},
		"logs":    {Name: "logs", Type: "host", Source: "logs", ReadOnly: true},
		"db":      {Name: "db", Type: "csi", Source: "vol1"},
	}}
}

// The host volume hook gives an isolating driver bind mounts of the
// node's directories (read-only when the mount, the request or the host
// volume says so; with the mount's propagation), and a raw_exec task the
// host paths in BERTH_VOLUME_<NAME> and ${volume.<name>}. CSI mounts are
// not its business.
func TestHostVolumeHook(t *testing.T) {
	task := &pb.Task{Name: "web", VolumeMounts: []*pb.VolumeMount{
		{Volume: "scratch", Destination: "/scratch", PropagationMode: PropagationBidirectional},
		{Volume: "logs", Destination: "/logs", PropagationMode: PropagationHostToTask},
		{Volume: "db", Destination: "/db"},
	}}
	group := hostVolumeGroup(task)
	node := map[string]*pb.HostVolumeInfo{"fast": {Path: "/srv/fast"}, "logs": {Path: "/var/log/apps"}}
	factory := HostVolumeTaskHook("node-1", func() map[string]*pb.HostVolumeInfo { return node })
	alloc := &pb.Allocation{Id: "a1"}
	if h := factory(runhooks.AllocInfo{Alloc: alloc, Group: group}, &pb.Task{Name: "plain",
		VolumeMounts: []*pb.VolumeMount{{Volume: "db", Destination: "/db"}}}); h != nil {
		t.Errorf("a host volume hook for a task mounting only a CSI volume")
	}
	h := factory(runhooks.AllocInfo{Alloc: alloc, Group: group}, task).(runhooks.PrestartHook)
	for _, isolated := range []bool{false, true} {
		resp := &runhooks.PrestartResponse{}
		req := &runhooks.PrestartRequest{TaskInfo: runhooks.TaskInfo{Alloc: alloc, Group: group, Task: task, Driver: mounts(isolated)}}
		if err := h.Prestart(context.Background(), req, resp); err != nil {
			t.Fatal(err)
		}
		wantEnv := map[string]string{"BERTH_VOLUME_SCRATCH": "/srv/fast", "BERTH_VOLUME_LOGS": "/var/log/apps"}
		if isolated {
			wantEnv = map[string]string{"BERTH_VOLUME_SCRATCH": "/scratch", "BERTH_VOLUME_LOGS": "/logs"}
			want := []*driverpb.Mount{
				{HostPath: "/srv/fast", TaskPath: "/scratch", Propagation: driverpb.MountPropagation_MOUNT_PROPAGATION_BIDIRECTIONAL},
				{HostPath: "/var/log/apps", TaskPath: "/logs", ReadOnly: true, Propagation: driverpb.MountPropagation_MOUNT_PROPAGATION_HOST_TO_TASK},
			}
			if len(resp.Mounts) != len(want) {
				t.Fatalf("mounts %v, want %v", resp.Mounts, want)
			}
			for i := range want {
				if resp.Mounts[i].String() != want[i].String() {
					t.Errorf("mount %d = %v, want %v", i, resp.Mounts[i], want[i])
				}
			}
		} else if len(resp.Mounts) != 0 {
			t.Errorf("raw_exec got mounts %v", resp.Mounts)
		}
		if len(resp.Env) != len(wantEnv) {
			t.Errorf("isolated %t: env %v, want %v", isolated, resp.Env, wantEnv)
		}
		for k, v := range wantEnv {
			name := strings.ToLower(strings.TrimPrefix(k, EnvVolumePrefix))
			if resp.Env[k] != v || resp.Vars[VarVolumePrefix+name] != v {
				t.Errorf("isolated %t: %s = %q, volume.%s = %q; want %q", isolated, k, resp.Env[k], name, resp.Vars[VarVolumePrefix+name], v)
			}
		}
	}

	// A host volume of the node's config read-only makes the bind read-only too.
	node["fast"].ReadOnly = true
	resp := &runhooks.PrestartResponse{}
	if err := h.Prestart(context.Background(), &runhooks.PrestartRequest{TaskInfo: runhooks.TaskInfo{Alloc: alloc, Group: group,
		Task: task, Driver: mounts(true)}}, resp); err != nil {
		t.Fatal(err)
	}
	if !resp.Mounts[0].GetReadOnly() {
		t.Errorf("mount of a read-only host volume is writable: %v", resp.Mounts[0])
	}

	// The node lost the host volume since the alloc was placed.
	delete(node, "fast")
	err := h.Prestart(context.Background(), &runhooks.PrestartRequest{TaskInfo: runhooks.TaskInfo{Alloc: alloc, Group: group,
		Task: task, Driver: mounts(false)}}, &runhooks.PrestartResponse{})
	if !errors.Is(err, ErrNoHostVolume) || !strings.Contains(err.Error(), `volume "scratch" (host volume "fast") of task "web", alloc a1, node node-1`) {
		t.Errorf("prestart without the host volume: %v", err)
	}
}

// A CSI volume_mount's propagation_mode reaches the driver too.
func TestMountPropagation(t *testing.T) {
	for mode, want := range map[string]driverpb.MountPropagation{
		"":                       driverpb.MountPropagation_MOUNT_PROPAGATION_PRIVATE,
		PropagationPrivate:       driverpb.MountPropagation_MOUNT_PROPAGATION_PRIVATE,
		PropagationHostToTask:    driverpb.MountPropagation_MOUNT_PROPAGATION_HOST_TO_TASK,
		PropagationBidirectional: driverpb.MountPropagation_MOUNT_PROPAGATION_BIDIRECTIONAL,
	} {
		if got := MountPropagation(mode); got != want {
			t.Errorf("MountPropagation(%q) = %v, want %v", mode, got, want)
		}
	}
}
