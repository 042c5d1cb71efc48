package volumehooks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/internal/runhooks"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

// The prerun blocks on the servers while the claim is reserved (one
// blocking call, woken by the change, no polling), then stages and
// publishes with the claim's capability, the request's mount options and
// the attachment's publish context, and reports in-use.
func TestPrerunWaitsForTheClaimThenPublishes(t *testing.T) {
	e := newVolEnv(t, nil)
	e.claims.set(hookAlloc, claimResp(pb.ClaimState_CLAIM_STATE_RESERVED))
	errc := make(chan error, 1)
	go func() { errc <- e.prerun(false) }()
	testutil.WaitFor(t, volWait, func() error {
		if e.claims.blockedCalls() == 0 {
			return errors.New("no blocking call on the reserved claim yet")
		}
		return nil
	})
	if n := e.plugin.NodePublishVolume.Count(); n != 0 {
		t.Fatalf("published a reserved claim (%d calls)", n)
	}
	e.claims.set(hookAlloc, claimResp(pb.ClaimState_CLAIM_STATE_READY))
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(volWait):
		t.Fatal("prerun did not return once the claim was ready")
	}
	if e.claims.callCount() != 2 {
		t.Errorf("%d ClientClaim calls, want 2 (reserved, then woken by ready)", e.claims.callCount())
	}
	if s, p := e.plugin.NodeStageVolume.Count(), e.plugin.NodePublishVolume.Count(); s != 1 || p != 1 {
		t.Fatalf("stage %d, publish %d; want 1 and 1", s, p)
	}
	pub := e.plugin.NodePublishVolume.Last()
	if pub.GetVolumeId() != "ext-1" || pub.GetPublishContext()["device"] != "/dev/x" || pub.GetSecrets()["k"] != "s" ||
		pub.GetVolumeCapability().GetAccessMode().GetMode().String() != "SINGLE_NODE_WRITER" ||
		strings.Join(pub.GetVolumeCapability().GetMount().GetMountFlags(), ",") != "noatime" || pub.GetReadonly() {
		t.Errorf("publish request %v", pub)
	}
	path := filepath.Join(e.dir, "csi", "publish", hookAlloc, volID)
	if _, err := os.Lstat(path); err != nil {
		t.Errorf("publish path: %v", err)
	}
	e.claims.waitUpdate(t, hookAlloc, volID, pb.ClaimState_CLAIM_STATE_IN_USE, false)
	if n := len(e.events.ofType(EventVolumeWaiting)); n != 1 {
		t.Errorf("%d waiting events, want 1", n)
	}
	if ev := e.events.ofType(EventVolumePublished); len(ev) != 1 || !strings.Contains(ev[0].GetMessage(), path) {
		t.Errorf("published events %v, want one naming %s", ev, path)
	}
	staging := filepath.Join(e.dir, "csi", "volumes", "hostpath", "staging", volID)
	if ev := e.events.ofType(EventVolumeStaged); len(ev) != 1 || !strings.Contains(ev[0].GetMessage(), staging) {
		t.Errorf("staged events %v, want one naming %s", ev, staging)
	}
	wantEventOrder(t, e.events, EventVolumeWaiting, EventVolumeStaged, EventVolumePublished)
}

// wantEventOrder checks that the events of types typs were emitted in
// that order, and that their times do not go back.
func wantEventOrder(t *testing.T, events *eventLog, typs ...string) {
	t.Helper()
	var got []string
	var last int64
	for _, ev := range events.all() {
		if !slices.Contains(typs, ev.GetType()) {
			continue
		}
		got = append(got, ev.GetType())
		if ev.GetOccurredAt() < last {
			t.Errorf("event %q at %d, before the one emitted ahead of it (%d)", ev.GetType(), ev.GetOccurredAt(), last)
		}
		last = ev.GetOccurredAt()
	}
	if !slices.Equal(got, typs) {
		t.Errorf("events %q, want %q", got, typs)
	}
}

// Postrun unpublishes, unstages (the alloc was the last user) and reports
// node-detached; run again, it does nothing more.
func TestPostrunTearsDownAndReportsNodeDetached(t *testing.T) {
	e := newVolEnv(t, nil)
	e.claims.set(hookAlloc, claimResp(pb.ClaimState_CLAIM_STATE_READY))
	if err := e.prerun(false); err != nil {
		t.Fatal(err)
	}
	if err := e.postrun(); err != nil {
		t.Fatal(err)
	}
	if u, s := e.plugin.NodeUnpublishVolume.Count(), e.plugin.NodeUnstageVolume.Count(); u != 1 || s != 1 {
		t.Fatalf("unpublish %d, unstage %d; want 1 and 1", u, s)
	}
	e.claims.waitUpdate(t, hookAlloc, volID, pb.ClaimState_CLAIM_STATE_NODE_DETACHED, false)
	// Each call is a task event, in the order they were made.
	wantEventOrder(t, e.events, EventVolumeStaged, EventVolumePublished, EventVolumeUnpublished, EventVolumeUnstaged)
	if err := e.postrun(); err != nil {
		t.Fatal(err)
	}
	if u := e.plugin.NodeUnpublishVolume.Count(); u != 1 {
		t.Errorf("a second postrun unpublished again (%d calls)", u)
	}
	wantEventOrder(t, e.events, EventVolumeStaged, EventVolumePublished, EventVolumeUnpublished, EventVolumeUnstaged)
}

// Local teardown does not wait for the servers: the report is queued,
// persisted, and delivered once they answer again.
func TestTeardownDoesNotWaitForServers(t *testing.T) {
	e := newVolEnv(t, nil)
	e.claims.set(hookAlloc, claimResp(pb.ClaimState_CLAIM_STATE_READY))
	if err := e.prerun(false); err != nil {
		t.Fatal(err)
	}
	e.claims.waitUpdate(t, hookAlloc, volID, pb.ClaimState_CLAIM_STATE_IN_USE, false)
	e.claims.fail(nil, status.Error(codes.Unavailable, "no leader"))
	if err := e.postrun(); err != nil {
		t.Fatal(err)
	}
	if s := e.plugin.NodeUnstageVolume.Count(); s != 1 {
		t.Fatalf("unstage %d calls with the servers away, want 1", s)
	}
	testutil.WaitFor(t, volWait, func() error {
		if e.reports.len() != 1 {
			return fmt.Errorf("%d persisted reports, want the node-detached one", e.reports.len())
		}
		return nil
	})
	// A client restart keeps the report, and delivers it once the servers
	// are back.
	e.restart()
	e.claims.fail(nil, nil)
	e.claims.waitUpdate(t, hookAlloc, volID, pb.ClaimState_CLAIM_STATE_NODE_DETACHED, false)
	testutil.WaitFor(t, volWait, func() error {
		if e.reports.len() != 0 {
			return fmt.Errorf("%d reports still queued", e.reports.len())
		}
		return nil
	})
}

// A node plugin that does not show up is waited for a bounded time; the
// error names the volume, the plugin, the alloc and the node, and is
// shown on the claim and in task events.
func TestPrerunPluginWaitIsBounded(t *testing.T) {
	e := newVolEnv(t, func(c *VolumeConfig) { c.PluginWait = 20 * time.Millisecond })
	e.plugins.close()
	e.claims.set(hookAlloc, claimResp(pb.ClaimState_CLAIM_STATE_READY))
	err := e.prerun(false)
	if !errors.Is(err, ErrNodePluginUnavailable) || errcode.Code(err) != codes.FailedPrecondition {
		t.Fatalf("prerun: %v, want ErrNodePluginUnavailable", err)
	}
	for _, s := range []string{`volume "data-vol"`, `"hostpath"`, "alloc " + hookAlloc, "node " + volNodeID} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not name %s", err, s)
		}
	}
	u := e.claims.waitUpdate(t, hookAlloc, volID, pb.ClaimState_CLAIM_STATE_READY, true)
	if u.GetError().GetMessage() != err.Error() || u.GetError().GetCode() != pb.GrpcCode(codes.FailedPrecondition) {
		t.Errorf("failed try reported %v", u.GetError())
	}
	if ev := e.events.ofType(EventVolumeFailure); len(ev) != 1 || ev[0].GetMessage() != err.Error() {
		t.Errorf("failure events %v", ev)
	}
}

// A final error of the plugin fails the prerun at once, is shown as
// final on the claim and in task events, and the teardown that follows
// undoes the staging.
func TestPrerunFinalErrorShownOnClaimAndEvents(t *testing.T) {
	e := newVolEnv(t, nil)
	e.plugin.NodePublishVolume.Next(nil, status.Error(codes.InvalidArgument, "unknown mount flag"))
	e.claims.set(hookAlloc, claimResp(pb.ClaimState_CLAIM_STATE_READY))
	err := e.prerun(false)
	if err == nil || !strings.Contains(err.Error(), "unknown mount flag") {
		t.Fatalf("prerun: %v", err)
	}
	u := e.claims.waitUpdate(t, hookAlloc, volID, pb.ClaimState_CLAIM_STATE_READY, true)
	if u.GetError().GetClass() != pb.VolumeErrorClass_VOLUME_ERROR_CLASS_FINAL || u.GetError().GetCode() != pb.GrpcCode(codes.InvalidArgument) {
		t.Errorf("reported error %v, want final InvalidArgument", u.GetError())
	}
	ev := e.events.ofType(EventVolumeFailure)
	if len(ev) != 1 {
		t.Fatalf("failure events %v", ev)
	}
	for _, s := range []string{`volume "data-vol"`, `alloc "` + hookAlloc + `"`, "node " + volNodeID} {
		if !strings.Contains(ev[0].GetMessage(), s) {
			t.Errorf("event %q does not name %s", ev[0].GetMessage(), s)
		}
	}
	if err := e.postrun(); err != nil {
		t.Fatal(err)
	}
	if s := e.plugin.NodeUnstageVolume.Count(); s != 1 {
		t.Errorf("unstage %d after a failed publish, want 1", s)
	}
}

// A teardown's final error is shown and retried: the claim is never left
// releasing for good.
func TestTeardownFinalErrorRetried(t *testing.T) {
	e := newVolEnv(t, nil)
	e.claims.set(hookAlloc, claimResp(pb.ClaimState_CLAIM_STATE_READY))
	if err := e.prerun(false); err != nil {
		t.Fatal(err)
	}
	e.plugin.NodeUnpublishVolume.Next(nil, status.Error(codes.FailedPrecondition, "device busy"))
	if err := e.postrun(); err != nil {
		t.Fatal(err)
	}
	if u := e.plugin.NodeUnpublishVolume.Count(); u != 2 {
		t.Errorf("unpublish %d calls, want 2 (final error, then retried)", u)
	}
	e.claims.waitUpdate(t, hookAlloc, volID, pb.ClaimState_CLAIM_STATE_NODE_DETACHED, false)
	if ev := e.events.ofType(EventVolumeFailure); len(ev) != 1 || !strings.Contains(ev[0].GetMessage(), "device busy") {
		t.Errorf("failure events %v", ev)
	}
}

// A recovered alloc whose volume is published goes on without the
// servers and without calling the plugin again.
func TestRecoveredPrerunKeepsPublished(t *testing.T) {
	e := newVolEnv(t, nil)
	e.claims.set(hookAlloc, claimResp(pb.ClaimState_CLAIM_STATE_READY))
	if err := e.prerun(false); err != nil {
		t.Fatal(err)
	}
	e.restart()
	e.claims.fail(status.Error(codes.Unavailable, "no servers"), status.Error(codes.Unavailable, "no servers"))
	calls := e.claims.callCount()
	if err := e.prerun(true); err != nil {
		t.Fatal(err)
	}
	if s, p := e.plugin.NodeStageVolume.Count(), e.plugin.NodePublishVolume.Count(); s != 1 || p != 1 || e.claims.callCount() != calls {
		t.Errorf("after recovery: stage %d, publish %d, %d more ClientClaim calls; want 1, 1, 0", s, p, e.claims.callCount()-calls)
	}
}

// Sweep tears down the uses of allocs the client no longer runs and
// reports them node-detached; a live alloc's use stays.
func TestSweepTearsDownUsesOfGoneAllocs(t *testing.T) {
	e := newVolEnv(t, nil)
	e.claims.set(hookAlloc, claimResp(pb.ClaimState_CLAIM_STATE_READY))
	if err := e.prerun(false); err != nil {
		t.Fatal(err)
	}
	e.restart()
	e.hooks.Sweep(func(id string) bool { return id != hookAlloc })
	e.claims.waitUpdate(t, hookAlloc, volID, pb.ClaimState_CLAIM_STATE_NODE_DETACHED, false)
	if u, s := e.plugin.NodeUnpublishVolume.Count(), e.plugin.NodeUnstageVolume.Count(); u != 1 || s != 1 {
		t.Errorf("unpublish %d, unstage %d; want 1 and 1", u, s)
	}
}

func TestReleasedClaimFailsPrerun(t *testing.T) {
	e := newVolEnv(t, nil)
	e.claims.set(hookAlloc, claimResp(pb.ClaimState_CLAIM_STATE_RELEASING))
	if err := e.prerun(false); !errors.Is(err, ErrClaimReleased) {
		t.Fatalf("prerun of a releasing claim: %v, want ErrClaimReleased", err)
	}
	if p := e.plugin.NodePublishVolume.Count(); p != 0 {
		t.Errorf("published a releasing claim")
	}
}

// The task hook gives an isolating driver a bind mount at the
// destination, and a raw_exec task the host path in BERTH_VOLUME_<NAME>
// and ${volume.<name>}.
func TestMountHook(t *testing.T) {
	e := newVolEnv(t, nil)
	task := &pb.Task{Name: "web", VolumeMounts: []*pb.VolumeMount{{Volume: "data", Destination: "/srv/data", ReadOnly: true, PropagationMode: PropagationHostToTask}, {Volume: "scratch", Destination: "/s"}}}
	// The group's one mount of data is read-only: the alloc publishes it
	// read-only, and a raw_exec task gets the publish path itself.
	group := volumeGroup()
	group.Tasks = []*pb.Task{task}
	info := runhooks.AllocInfo{Alloc: volumeAlloc(), Group: group}
	if h := e.hooks.TaskHook()(info, &pb.Task{Name: "plain"}); h != nil {
		t.Errorf("a hook for a task without volume mounts")
	}
	if h := e.hooks.AllocHook()(runhooks.AllocInfo{Alloc: volumeAlloc(), Group: &pb.TaskGroup{Name: "g"}}); h != nil {
		t.Errorf("an alloc hook for a group without csi volumes")
	}
	h := e.hooks.TaskHook()(info, task).(runhooks.PrestartHook)
	host := filepath.Join(e.dir, "csi", "publish", hookAlloc, volID)
	for _, isolated := range []bool{false, true} {
		resp := &runhooks.PrestartResponse{}
		req := &runhooks.PrestartRequest{TaskInfo: runhooks.TaskInfo{Alloc: volumeAlloc(), Task: task, Driver: mounts(isolated)}}
		if err := h.Prestart(context.Background(), req, resp); err != nil {
			t.Fatal(err)
		}
		want := host
		if isolated {
			want = "/srv/data"
			if len(resp.Mounts) != 1 || resp.Mounts[0].GetHostPath() != host || resp.Mounts[0].GetTaskPath() != "/srv/data" || !resp.Mounts[0].GetReadOnly() ||
				resp.Mounts[0].GetPropagation() != driverpb.MountPropagation_MOUNT_PROPAGATION_HOST_TO_TASK {
				t.Errorf("isolated mounts %v", resp.Mounts)
			}
		} else if len(resp.Mounts) != 0 {
			t.Errorf("raw_exec got mounts %v", resp.Mounts)
		}
		if resp.Env["BERTH_VOLUME_DATA"] != want || resp.Vars["volume.data"] != want || len(resp.Env) != 1 {
			t.Errorf("isolated %t: env %v, vars %v; want %s", isolated, resp.Env, resp.Vars, want)
		}
	}
	if got := EnvName("my-data.v2"); got != "BERTH_VOLUME_MY_DATA_V2" {
		t.Errorf("EnvName = %q", got)
	}
}

func TestVolumeSentinelsCarryTheirCodes(t *testing.T) {
	testutil.CheckSentinelCodes(t, map[error]codes.Code{
		ErrNodePluginUnavailable: codes.FailedPrecondition,
		ErrClaimReleased:         codes.FailedPrecondition,
		ErrReadOnlyMount:         codes.FailedPrecondition,
		ErrDetachInUse:           codes.FailedPrecondition,
		ErrDetachPluginGone:      codes.FailedPrecondition,
		errDetachUnfinished:      codes.Unavailable,
		ErrNoHostVolume:          codes.FailedPrecondition,
	})
}

// The servers' refusals: node-detached refused with FailedPrecondition
// (the claim not releasing yet) is tried again until taken; in-use
// refused so (the claim moved on) is dropped, as is any report on a claim
// gone.
func TestReporterRetriesOnlyWhatMayChange(t *testing.T) {
	e := newVolEnv(t, nil)
	e.claims.fail(nil, status.Error(codes.FailedPrecondition, "claim is in-use, not releasing"))
	detached := claimReport(volNodeID, "a1", "", "v1")
	detached.State = pb.ClaimState_CLAIM_STATE_NODE_DETACHED
	inUse := claimReport(volNodeID, "a2", "", "v1")
	inUse.State = pb.ClaimState_CLAIM_STATE_IN_USE
	for _, r := range []*pb.ClientClaimUpdateRequest{detached, inUse} {
		e.rep.Queue(r)
	}
	testutil.WaitFor(t, volWait, func() error {
		if p := e.rep.Pending(); len(p) != 1 || p[0].GetAllocId() != "a1" {
			return fmt.Errorf("pending %v, want a1's node-detached alone", p)
		}
		return nil
	})
	e.claims.fail(nil, nil)
	e.claims.waitUpdate(t, "a1", "v1", pb.ClaimState_CLAIM_STATE_NODE_DETACHED, false)
	testutil.WaitFor(t, volWait, func() error {
		if n := e.reports.len(); n != 0 {
			return fmt.Errorf("%d reports persisted", n)
		}
		return nil
	})
}

// A prerun whose claim never becomes ready ends with its deadline, saying
// what the claim waited on.
func TestPrerunClaimWaitSaysWhatItWaitedOn(t *testing.T) {
	e := newVolEnv(t, nil)
	r := claimResp(pb.ClaimState_CLAIM_STATE_RESERVED)
	r.AttachmentState = pb.AttachmentState_ATTACHMENT_STATE_ATTACHING
	e.claims.set(hookAlloc, r)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := e.hook().Prerun(ctx, &runhooks.PrerunRequest{AllocInfo: runhooks.AllocInfo{Alloc: volumeAlloc(), Group: volumeGroup(), Events: e.events}})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("prerun: %v, want the deadline", err)
	}
	for _, s := range []string{`claim "claim-1" is reserved`, "attaching (controller publish not done)", `volume "data-vol"`, "alloc " + hookAlloc} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
}

// A teardown whose node plugin is gone is not waited on in silence: each
// try that runs out is shown on the claim (releasing, uncertain) naming
// the volume, the alloc, the node and the plugin; once the plugin is back
// the teardown finishes and node-detached is reported.
func TestTeardownWithoutItsPluginIsShownThenFinishes(t *testing.T) {
	e := newVolEnv(t, func(c *VolumeConfig) {
		c.TeardownAttempt = 20 * time.Millisecond
		c.TeardownWait = 10 * time.Millisecond
	})
	e.claims.set(hookAlloc, claimResp(pb.ClaimState_CLAIM_STATE_READY))
	if err := e.prerun(false); err != nil {
		t.Fatal(err)
	}
	e.plugins.close()
	if err := e.postrun(); err == nil || !strings.Contains(err.Error(), "going on in the background") {
		t.Fatalf("postrun: %v, want the teardown left running", err)
	}
	u := e.claims.waitUpdate(t, hookAlloc, volID, pb.ClaimState_CLAIM_STATE_RELEASING, true)
	for _, s := range []string{`volume "data-vol"`, `alloc "` + hookAlloc + `"`, "node " + volNodeID, `plugin "hostpath"`} {
		if !strings.Contains(u.GetError().GetMessage(), s) {
			t.Errorf("reported error %q lacks %s", u.GetError().GetMessage(), s)
		}
	}
	if u.GetError().GetClass() != pb.VolumeErrorClass_VOLUME_ERROR_CLASS_UNCERTAIN {
		t.Errorf("error class %s, want uncertain", u.GetError().GetClass())
	}
	e.plugins.reopen()
	e.claims.waitUpdate(t, hookAlloc, volID, pb.ClaimState_CLAIM_STATE_NODE_DETACHED, false)
	// A try whose 20 ms run out while a call is on the wire repeats that
	// call (node calls are idempotent), so each is asked for at least once.
	if up, us := e.plugin.NodeUnpublishVolume.Count(), e.plugin.NodeUnstageVolume.Count(); up < 1 || us < 1 {
		t.Errorf("unpublish %d, unstage %d; want each called", up, us)
	}
}

// A recovered alloc whose use was saved published but whose in-use report
// was never queued (the client died in between) reports in-use from its
// recovered prerun, without calling the plugin again.
func TestRecoveredPrerunReportsInUseAgain(t *testing.T) {
	e := newVolEnv(t, nil)
	e.savePublished(hookAlloc, false)
	e.restart()
	e.claims.set(hookAlloc, claimResp(pb.ClaimState_CLAIM_STATE_READY))
	if err := e.prerun(true); err != nil {
		t.Fatal(err)
	}
	e.claims.waitUpdate(t, hookAlloc, volID, pb.ClaimState_CLAIM_STATE_IN_USE, false)
	if s, p := e.plugin.NodeStageVolume.Count(), e.plugin.NodePublishVolume.Count(); s != 0 || p != 0 {
		t.Errorf("recovered prerun staged %d, published %d times; want 0, 0", s, p)
	}
}
