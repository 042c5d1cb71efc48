package volumehooks

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"berth.dev/berth/internal/allocdir"
	"berth.dev/berth/internal/runhooks"
	"berth.dev/berth/internal/testutil"
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
// host paths in BERTH_VOLUME_<NAME> and ${volume.<name>} (a read-only
// mount there: TestHostVolumeReadOnlyUnderRawExec). CSI mounts are not
// its business.
func TestHostVolumeHook(t *testing.T) {
	task := &pb.Task{Name: "web", VolumeMounts: []*pb.VolumeMount{
		{Volume: "scratch", Destination: "/scratch", PropagationMode: PropagationBidirectional},
		{Volume: "logs", Destination: "/logs", PropagationMode: PropagationHostToTask},
		{Volume: "db", Destination: "/db"},
	}}
	group := hostVolumeGroup(task)
	group.Volumes["logs"].ReadOnly = false
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
				{HostPath: "/var/log/apps", TaskPath: "/logs", Propagation: driverpb.MountPropagation_MOUNT_PROPAGATION_HOST_TO_TASK},
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

	// A read_only request makes the bind read-only.
	group.Volumes["logs"].ReadOnly = true
	resp0 := &runhooks.PrestartResponse{}
	if err := h.Prestart(context.Background(), &runhooks.PrestartRequest{TaskInfo: runhooks.TaskInfo{Alloc: alloc, Group: group,
		Task: task, Driver: mounts(true)}}, resp0); err != nil {
		t.Fatal(err)
	}
	if !resp0.Mounts[1].GetReadOnly() {
		t.Errorf("mount of a read_only request is writable: %v", resp0.Mounts[1])
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

// A read-only mount of a host volume under an unisolated driver
// (raw_exec) gets a read-only bind mount of the host path in the task's
// directory, as a CSI volume's does: writing there fails with EROFS,
// reading works; the attempt's exit removes the bind.
func TestHostVolumeReadOnlyUnderRawExec(t *testing.T) {
	testutil.RequireRoot(t, "bind-mounts a host volume read-only for a raw_exec task")
	dir := t.TempDir()
	hostPath := filepath.Join(dir, "logs")
	if err := os.MkdirAll(hostPath, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hostPath, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	task := &pb.Task{Name: "web", Driver: "raw_exec", VolumeMounts: []*pb.VolumeMount{{Volume: "logs", Destination: "/logs"}}}
	group := hostVolumeGroup(task)
	node := map[string]*pb.HostVolumeInfo{"logs": {Path: hostPath, Id: "hv-1"}}
	alloc := &pb.Allocation{Id: "a1"}
	h := HostVolumeTaskHook("node-1", func() map[string]*pb.HostVolumeInfo { return node })(runhooks.AllocInfo{Alloc: alloc, Group: group}, task)
	ad, err := allocdir.New(filepath.Join(dir, "data"), alloc.GetId())
	if err != nil {
		t.Fatal(err)
	}
	td, err := ad.TaskDir(task.GetName())
	if err != nil {
		t.Fatal(err)
	}
	if err := td.Build(); err != nil {
		t.Fatal(err)
	}
	resp := &runhooks.PrestartResponse{}
	req := &runhooks.PrestartRequest{TaskInfo: runhooks.TaskInfo{Alloc: alloc, Group: group, Task: task, Dir: td, Driver: mounts(false)}}
	if err := h.(runhooks.PrestartHook).Prestart(context.Background(), req, resp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unmountAll(resp.Env["BERTH_VOLUME_LOGS"]) })
	where := resp.Env["BERTH_VOLUME_LOGS"]
	if want := filepath.Join(td.Dir, ReadOnlyDir, "hv-1"); where != want || resp.Vars["volume.logs"] != want {
		t.Fatalf("the task's path %q, want its read-only bind %s", where, want)
	}
	if b, err := os.ReadFile(filepath.Join(where, "f")); err != nil || string(b) != "x" {
		t.Fatalf("reading through the bind: %q, %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(where, "g"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("writing through the bind: %v, want EROFS", err)
	}
	if err := h.(runhooks.ExitedHook).Exited(context.Background(), &runhooks.ExitedRequest{TaskInfo: runhooks.TaskInfo{Dir: td}}); err != nil {
		t.Fatal(err)
	}
	if roBindMounted(t, where) {
		t.Fatal("the bind outlived the attempt")
	}
}

type queuedReports struct {
	reqs []*pb.ClientClaimUpdateRequest
}

func (q *queuedReports) Queue(req *pb.ClientClaimUpdateRequest) { q.reqs = append(q.reqs, req) }

// At the alloc's end its dynamic host volume claims are reported
// node-detached (once per volume); static host volumes have no claim.
func TestHostVolumeAllocHookReportsDetached(t *testing.T) {
	task := &pb.Task{Name: "web"}
	group := hostVolumeGroup(task)
	group.Volumes["again"] = &pb.VolumeRequest{Name: "again", Type: "host", Source: "fast", ReadOnly: true}
	node := map[string]*pb.HostVolumeInfo{"fast": {Path: "/vols/hv-1", Id: "hv-1"}, "logs": {Path: "/var/log/apps"}}
	q := &queuedReports{}
	factory := HostVolumeAllocHook("node-1", func() map[string]*pb.HostVolumeInfo { return node }, q)
	if h := factory(runhooks.AllocInfo{Alloc: &pb.Allocation{Id: "a0"}, Group: &pb.TaskGroup{Name: "plain"}}); h != nil {
		t.Error("a hook for a group without host volumes")
	}
	alloc := &pb.Allocation{Id: "a1"}
	h := factory(runhooks.AllocInfo{Alloc: alloc, Group: group}).(runhooks.PostrunHook)
	if err := h.Postrun(context.Background(), &runhooks.PostrunRequest{AllocInfo: runhooks.AllocInfo{Alloc: alloc, Group: group}}); err != nil {
		t.Fatal(err)
	}
	if len(q.reqs) != 1 || q.reqs[0].GetVolumeId() != "hv-1" || q.reqs[0].GetAllocId() != "a1" || q.reqs[0].GetNodeId() != "node-1" ||
		q.reqs[0].GetState() != pb.ClaimState_CLAIM_STATE_NODE_DETACHED {
		t.Fatalf("reports %v", q.reqs)
	}
}
