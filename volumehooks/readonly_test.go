package volumehooks

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"berth.dev/berth/internal/allocdir"
	"berth.dev/berth/internal/runhooks"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// publishReadOnly: read-only when every request naming the volume is, or
// every mount of it in the group is (and there is one); writable when
// any task mounts it writable, or no task mounts it at all.
func TestPublishReadOnlyFollowsEveryMountOfTheVolume(t *testing.T) {
	ro := func(vol string) *pb.VolumeMount {
		return &pb.VolumeMount{Volume: vol, Destination: "/d", ReadOnly: true}
	}
	rw := func(vol string) *pb.VolumeMount { return &pb.VolumeMount{Volume: vol, Destination: "/d"} }
	req := func(src string, readOnly bool) *pb.VolumeRequest {
		return &pb.VolumeRequest{Type: "csi", Source: src, ReadOnly: readOnly}
	}
	for _, tc := range []struct {
		name string
		reqs map[string]*pb.VolumeRequest
		// mounts per task
		mounts [][]*pb.VolumeMount
		want   bool
	}{
		{"one read-only mount", map[string]*pb.VolumeRequest{"a": req("v", false)}, [][]*pb.VolumeMount{{ro("a")}}, true},
		{"read-only in two tasks", map[string]*pb.VolumeRequest{"a": req("v", false)}, [][]*pb.VolumeMount{{ro("a")}, {ro("a")}}, true},
		{"mixed", map[string]*pb.VolumeRequest{"a": req("v", false)}, [][]*pb.VolumeMount{{ro("a")}, {rw("a")}}, false},
		{"not mounted", map[string]*pb.VolumeRequest{"a": req("v", false)}, [][]*pb.VolumeMount{{}}, false},
		{"read-only request", map[string]*pb.VolumeRequest{"a": req("v", true)}, [][]*pb.VolumeMount{{rw("a")}}, true},
		{"two names of one volume, one mounted writable", map[string]*pb.VolumeRequest{"a": req("v", false), "b": req("v", false)},
			[][]*pb.VolumeMount{{ro("a")}, {rw("b")}}, false},
		{"two names of one volume, both read-only", map[string]*pb.VolumeRequest{"a": req("v", false), "b": req("v", false)},
			[][]*pb.VolumeMount{{ro("a")}, {ro("b")}}, true},
		{"another volume mounted writable", map[string]*pb.VolumeRequest{"a": req("v", false), "b": req("w", false)},
			[][]*pb.VolumeMount{{ro("a"), rw("b")}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &pb.TaskGroup{Name: "g", Volumes: tc.reqs}
			for i, ms := range tc.mounts {
				g.Tasks = append(g.Tasks, &pb.Task{Name: string(rune('a' + i)), VolumeMounts: ms})
			}
			vols := groupVolumes(g, &pb.Allocation{Id: hookAlloc})
			i := slices.IndexFunc(vols, func(cv csiVolume) bool { return cv.volumeID == "v" })
			if i < 0 || vols[i].readOnly != tc.want {
				t.Fatalf("volumes %+v: publish of v read-only %v, want %v", vols, i >= 0 && vols[i].readOnly, tc.want)
			}
		})
	}
}

// An alloc whose every mount of the volume is read-only publishes it
// read-only (NodePublishVolume readonly); one with a writable mount too
// publishes it writable.
func TestPrerunPublishesReadOnlyWhenEveryMountIs(t *testing.T) {
	for _, mixed := range []bool{false, true} {
		e := newVolEnv(t, nil)
		e.claims.set(hookAlloc, claimResp(pb.ClaimState_CLAIM_STATE_READY))
		g := volumeGroup()
		g.Tasks = []*pb.Task{{Name: "reader", VolumeMounts: []*pb.VolumeMount{{Volume: "data", Destination: "/d", ReadOnly: true}}}}
		if mixed {
			g.Tasks = append(g.Tasks, &pb.Task{Name: "writer", VolumeMounts: []*pb.VolumeMount{{Volume: "data", Destination: "/d"}}})
		}
		info := runhooks.AllocInfo{Alloc: volumeAlloc(), Group: g, Events: e.events}
		h := e.hooks.AllocHook()(info).(*volumeHook)
		if err := h.Prerun(context.Background(), &runhooks.PrerunRequest{AllocInfo: info}); err != nil {
			t.Fatal(err)
		}
		if got := e.plugin.NodePublishVolume.Last().GetReadonly(); got == mixed {
			t.Errorf("mixed %v: NodePublishVolume readonly = %v, want %v", mixed, got, !mixed)
		}
	}
}

// A read-only mount under an unisolated driver of a volume the alloc
// publishes writable (a sibling writes): the task gets a read-only bind
// mount of the publish target in its own directory, where writing fails
// with EROFS and reading works; the writable sibling gets the publish
// path, where writing works. The task's exit removes the bind, its next
// start makes it again, and the alloc's teardown removes what is left
// before unpublishing.
func TestReadOnlyMountOfAWritablePublishUnderRawExec(t *testing.T) {
	testutil.RequireRoot(t, "bind-mounts the publish target read-only for a raw_exec task")
	e := newVolEnv(t, nil)
	e.claims.set(hookAlloc, claimResp(pb.ClaimState_CLAIM_STATE_READY))
	reader := &pb.Task{Name: "reader", Driver: "raw_exec", VolumeMounts: []*pb.VolumeMount{{Volume: "data", Destination: "/d", ReadOnly: true}}}
	writer := &pb.Task{Name: "writer", Driver: "raw_exec", VolumeMounts: []*pb.VolumeMount{{Volume: "data", Destination: "/d"}}}
	g := volumeGroup()
	g.Tasks = []*pb.Task{reader, writer}
	info := runhooks.AllocInfo{Alloc: volumeAlloc(), Group: g, Events: e.events}
	vh := e.hooks.AllocHook()(info).(*volumeHook)
	if err := vh.Prerun(context.Background(), &runhooks.PrerunRequest{AllocInfo: info}); err != nil {
		t.Fatal(err)
	}
	// The fake plugin makes no mount: the publish target is a directory
	// the test makes, standing for the plugin's writable mount.
	target := e.plugin.NodePublishVolume.Last().GetTargetPath()
	if err := os.MkdirAll(target, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unmountTaskBinds(e.dir, hookAlloc, volID) })
	ad, err := allocdir.New(e.dir, hookAlloc)
	if err != nil {
		t.Fatal(err)
	}
	prestart := func(task *pb.Task, recovered bool) (runhooks.Hook, allocdir.TaskDir, string) {
		t.Helper()
		td, err := ad.TaskDir(task.GetName())
		if err != nil {
			t.Fatal(err)
		}
		if err := td.Build(); err != nil {
			t.Fatal(err)
		}
		h := e.hooks.TaskHook()(info, task)
		resp := &runhooks.PrestartResponse{}
		req := &runhooks.PrestartRequest{TaskInfo: runhooks.TaskInfo{Alloc: volumeAlloc(), Group: g, Task: task, Dir: td, Driver: mounts(false)},
			Recovered: recovered}
		if err := h.(runhooks.PrestartHook).Prestart(context.Background(), req, resp); err != nil {
			t.Fatalf("prestart of %s: %v", task.GetName(), err)
		}
		if resp.Env["BERTH_VOLUME_DATA"] != resp.Vars["volume.data"] || len(resp.Mounts) != 0 {
			t.Fatalf("prestart of %s: env %v, vars %v, mounts %v", task.GetName(), resp.Env, resp.Vars, resp.Mounts)
		}
		return h, td, resp.Env["BERTH_VOLUME_DATA"]
	}

	_, _, wpath := prestart(writer, false)
	if want := filepath.Join(e.dir, "csi", "publish", hookAlloc, volID); wpath != want {
		t.Fatalf("writer's volume path %q, want the publish path %q", wpath, want)
	}
	if err := os.WriteFile(filepath.Join(wpath, "f"), []byte("from the writer"), 0o644); err != nil {
		t.Fatalf("the writable sibling cannot write: %v", err)
	}
	rh, rtd, rpath := prestart(reader, false)
	if want := filepath.Join(rtd.Dir, ReadOnlyDir, volID); rpath != want {
		t.Fatalf("reader's volume path %q, want its read-only bind %q", rpath, want)
	}
	if b, err := os.ReadFile(filepath.Join(rpath, "f")); err != nil || string(b) != "from the writer" {
		t.Fatalf("reading through the read-only bind: %q, %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(rpath, "g"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("writing through the read-only bind: %v, want EROFS", err)
	}
	// A recovered task keeps its bind (it may be in it).
	if _, _, again := prestart(reader, true); again != rpath || !roBindMounted(t, rpath) {
		t.Fatalf("recovered prestart: path %q, mounted %v", again, roBindMounted(t, rpath))
	}

	// The attempt exits: the bind goes; the next start makes it again.
	if err := rh.(runhooks.ExitedHook).Exited(context.Background(), &runhooks.ExitedRequest{TaskInfo: runhooks.TaskInfo{Dir: rtd}}); err != nil {
		t.Fatal(err)
	}
	if roBindMounted(t, rpath) {
		t.Fatal("the read-only bind is still mounted after the task exited")
	}
	prestart(reader, false)
	if !roBindMounted(t, rpath) {
		t.Fatal("no read-only bind for the next attempt")
	}

	// The alloc's teardown removes the bind before it unpublishes.
	if err := vh.Postrun(context.Background(), &runhooks.PostrunRequest{AllocInfo: info}); err != nil {
		t.Fatal(err)
	}
	if roBindMounted(t, rpath) {
		t.Fatal("the read-only bind is still mounted after the alloc's teardown")
	}
	if n := e.plugin.NodeUnpublishVolume.Count(); n != 1 {
		t.Fatalf("%d unpublish calls, want 1", n)
	}
}

// A read-only bind left behind by a client that died (the alloc gone
// while it was down) is removed by the teardown Sweep starts, before the
// unpublish.
func TestSweepRemovesALeftReadOnlyBind(t *testing.T) {
	testutil.RequireRoot(t, "bind-mounts the publish target read-only")
	e := newVolEnv(t, nil)
	e.claims.set(hookAlloc, claimResp(pb.ClaimState_CLAIM_STATE_READY))
	if err := e.prerun(false); err != nil {
		t.Fatal(err)
	}
	target := e.plugin.NodePublishVolume.Last().GetTargetPath()
	if err := os.MkdirAll(target, 0o755); err != nil {
		t.Fatal(err)
	}
	bind := taskReadOnlyPath(filepath.Join(e.dir, "alloc", hookAlloc, "reader"), volID)
	other := taskReadOnlyPath(filepath.Join(e.dir, "alloc", "another-alloc", "reader"), volID)
	for _, p := range []string{bind, other} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := bindReadOnly(target, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unmountAll(p) })
	}
	e.restart()
	e.hooks.Sweep(func(string) bool { return false })
	e.claims.waitUpdate(t, hookAlloc, volID, pb.ClaimState_CLAIM_STATE_NODE_DETACHED, false)
	if roBindMounted(t, bind) {
		t.Fatal("the gone alloc's read-only bind is still mounted after its teardown")
	}
	if !roBindMounted(t, other) {
		t.Fatal("another alloc's read-only bind was removed")
	}
}

func roBindMounted(t *testing.T, p string) bool {
	t.Helper()
	ok, err := isMountPoint(p)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// A symlink a task planted where its read-only bind goes makes prestart
// fail before the client creates or mounts anything through it.
func TestReadOnlyBindRefusesAPlantedSymlink(t *testing.T) {
	testutil.RequireRoot(t, "bind-mounts the publish target read-only for a raw_exec task")
	e := newVolEnv(t, nil)
	e.claims.set(hookAlloc, claimResp(pb.ClaimState_CLAIM_STATE_READY))
	reader := &pb.Task{Name: "reader", Driver: "raw_exec", VolumeMounts: []*pb.VolumeMount{{Volume: "data", Destination: "/d", ReadOnly: true}}}
	writer := &pb.Task{Name: "writer", Driver: "raw_exec", VolumeMounts: []*pb.VolumeMount{{Volume: "data", Destination: "/d"}}}
	g := volumeGroup()
	g.Tasks = []*pb.Task{reader, writer}
	info := runhooks.AllocInfo{Alloc: volumeAlloc(), Group: g, Events: e.events}
	vh := e.hooks.AllocHook()(info).(*volumeHook)
	if err := vh.Prerun(context.Background(), &runhooks.PrerunRequest{AllocInfo: info}); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(e.plugin.NodePublishVolume.Last().GetTargetPath(), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unmountTaskBinds(e.dir, hookAlloc, volID) })
	ad, err := allocdir.New(e.dir, hookAlloc)
	if err != nil {
		t.Fatal(err)
	}
	td, err := ad.TaskDir(reader.GetName())
	if err != nil {
		t.Fatal(err)
	}
	if err := td.Build(); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	for _, planted := range []struct{ link, at string }{
		{filepath.Join(td.Dir, ReadOnlyDir), outside},                            // the csi-volumes dir
		{filepath.Join(td.Dir, ReadOnlyDir, volID), filepath.Join(outside, "v")}, // the volume's own dir
	} {
		_ = os.RemoveAll(filepath.Join(td.Dir, ReadOnlyDir))
		if planted.link != filepath.Join(td.Dir, ReadOnlyDir) {
			if err := os.Mkdir(filepath.Join(td.Dir, ReadOnlyDir), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink(planted.at, planted.link); err != nil {
			t.Fatal(err)
		}
		h := e.hooks.TaskHook()(info, reader)
		req := &runhooks.PrestartRequest{TaskInfo: runhooks.TaskInfo{Alloc: volumeAlloc(), Group: g, Task: reader, Dir: td, Driver: mounts(false)}}
		err := h.(runhooks.PrestartHook).Prestart(context.Background(), req, &runhooks.PrestartResponse{})
		if !errors.Is(err, ErrReadOnlyMount) {
			t.Fatalf("symlink at %s: prestart %v, want ErrReadOnlyMount", planted.link, err)
		}
		if entries, _ := os.ReadDir(outside); len(entries) != 0 {
			t.Fatalf("symlink at %s: the client created %v outside the task dir", planted.link, entries)
		}
		if roBindMounted(t, planted.at) {
			t.Fatalf("symlink at %s: the client mounted at its target", planted.link)
		}
	}
}
