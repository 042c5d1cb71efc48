package volumehooks

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

func detachReq(live bool, plugin error) DetachRequest {
	return DetachRequest{VolumeID: volID, Users: []DetachUser{{ClaimID: "claim-" + hookAlloc, AllocID: hookAlloc}},
		Live: func(string) bool { return live }, NodePlugin: func(string) error { return plugin }}
}

// userErr returns the error of the request's only user, failing unless it
// is the only one.
func userErr(t *testing.T, res DetachResult) error {
	t.Helper()
	if len(res.Users) != 1 {
		t.Fatalf("detach answered %d users, want 1", len(res.Users))
	}
	if res.Users[0].Outcome == DetachFailed {
		return res.Users[0].Err
	}
	return nil
}

func (e *volEnv) usageRecords() int {
	e.usage.mu.Lock()
	defer e.usage.mu.Unlock()
	return len(e.usage.recs)
}

// A volume left published for an alloc the client no longer runs is
// unpublished and unstaged once each, its usage record cleared and its
// node-detached report sent; a second detach finds nothing to do.
func TestDetachTearsDownAGoneAllocsUse(t *testing.T) {
	e := newVolEnv(t, nil)
	e.claims.set(hookAlloc, claimResp(pb.ClaimState_CLAIM_STATE_READY))
	if err := e.prerun(false); err != nil {
		t.Fatal(err)
	}
	res, err := e.hooks.Detach(context.Background(), detachReq(false, nil))
	if err != nil {
		t.Fatal(err)
	}
	if res.PluginID != "hostpath" || len(res.Allocs) != 1 || res.Allocs[0] != hookAlloc || len(res.Claims) != 0 || !res.Unstaged {
		t.Fatalf("detach did %+v, want alloc %s unpublished and the volume unstaged, plugin hostpath", res, hookAlloc)
	}
	if u, s := e.plugin.NodeUnpublishVolume.Count(), e.plugin.NodeUnstageVolume.Count(); u != 1 || s != 1 {
		t.Fatalf("unpublish %d, unstage %d; want 1 and 1", u, s)
	}
	if n := e.usageRecords(); n != 0 {
		t.Fatalf("%d usage records left after the detach, want none", n)
	}
	e.claims.waitUpdate(t, hookAlloc, volID, pb.ClaimState_CLAIM_STATE_NODE_DETACHED, false)

	res, err = e.hooks.Detach(context.Background(), detachReq(false, nil))
	if err != nil || res.PluginID != "" || len(res.Allocs) != 0 || res.Unstaged || res.Users[0].Outcome != DetachNotHeld {
		t.Fatalf("second detach: %+v, %v; want nothing done, the alloc not held", res, err)
	}
	if u, s := e.plugin.NodeUnpublishVolume.Count(), e.plugin.NodeUnstageVolume.Count(); u != 1 || s != 1 {
		t.Fatalf("after a second detach: unpublish %d, unstage %d; want still 1 and 1", u, s)
	}
}

// A live alloc's use refuses the detach, naming the volume, the node and
// the alloc; nothing is called.
func TestDetachRefusedWhileAnAllocLives(t *testing.T) {
	e := newVolEnv(t, nil)
	e.claims.set(hookAlloc, claimResp(pb.ClaimState_CLAIM_STATE_READY))
	if err := e.prerun(false); err != nil {
		t.Fatal(err)
	}
	_, err := e.hooks.Detach(context.Background(), detachReq(true, nil))
	if !errors.Is(err, ErrDetachInUse) || errcode.Code(err) != codes.FailedPrecondition {
		t.Fatalf("detach with a live alloc: %v, want ErrDetachInUse", err)
	}
	for _, w := range []string{volID, volNodeID, "alloc " + hookAlloc} {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("refusal %q does not name %q", err, w)
		}
	}
	if u := e.plugin.NodeUnpublishVolume.Count(); u != 0 || e.usageRecords() != 1 {
		t.Fatalf("a refused detach unpublished (%d calls) or dropped the usage record", u)
	}
}

// A node plugin that is not running refuses the detach, naming it.
func TestDetachWithoutItsPluginNamesIt(t *testing.T) {
	e := newVolEnv(t, nil)
	e.claims.set(hookAlloc, claimResp(pb.ClaimState_CLAIM_STATE_READY))
	if err := e.prerun(false); err != nil {
		t.Fatal(err)
	}
	_, err := e.hooks.Detach(context.Background(), detachReq(false, errors.New("no node instance")))
	if !errors.Is(err, ErrDetachPluginGone) || errcode.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), `"hostpath"`) {
		t.Fatalf("detach without the plugin: %v, want ErrDetachPluginGone naming plugin \"hostpath\"", err)
	}
	if u := e.plugin.NodeUnpublishVolume.Count(); u != 0 {
		t.Fatalf("unpublish called %d times without the plugin", u)
	}
}

// A teardown that keeps failing, waiting an hour for its next try, is
// tried again at once by a detach, which answers that try's error; once
// the plugin's complaint is gone, the next detach's try succeeds.
func TestDetachRetriesAFailingTeardownNow(t *testing.T) {
	e := newVolEnv(t, func(c *VolumeConfig) {
		c.TeardownRetry, c.TeardownRetryMax, c.TeardownWait = time.Hour, time.Hour, time.Millisecond
	})
	e.claims.set(hookAlloc, claimResp(pb.ClaimState_CLAIM_STATE_READY))
	if err := e.prerun(false); err != nil {
		t.Fatal(err)
	}
	busy := status.Error(codes.FailedPrecondition, "device busy")
	e.plugin.NodeUnpublishVolume.Next(nil, busy)
	e.plugin.NodeUnpublishVolume.Next(nil, busy)
	_ = e.postrun() // still under way after TeardownWait
	e.claims.waitUpdate(t, hookAlloc, volID, pb.ClaimState_CLAIM_STATE_RELEASING, true)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := e.hooks.Detach(ctx, detachReq(false, nil))
	if err != nil {
		t.Fatal(err)
	}
	err = userErr(t, res)
	if err == nil || !strings.Contains(err.Error(), "device busy") || errcode.Code(err) != codes.FailedPrecondition || ctx.Err() != nil {
		t.Fatalf("detach of a teardown that fails: %v, want the plugin's FailedPrecondition at once", err)
	}
	if u := e.plugin.NodeUnpublishVolume.Count(); u != 2 {
		t.Fatalf("unpublish %d calls, want 2 (the failed teardown's, the detach's)", u)
	}
	res, err = e.hooks.Detach(ctx, detachReq(false, nil))
	if err != nil || len(res.Allocs) != 1 || !res.Unstaged || res.Users[0].Outcome != DetachDone {
		t.Fatalf("detach once the plugin lets go: %+v, %v", res, err)
	}
	if u, s := e.plugin.NodeUnpublishVolume.Count(), e.plugin.NodeUnstageVolume.Count(); u != 3 || s != 1 {
		t.Fatalf("unpublish %d, unstage %d; want 3 and 1", u, s)
	}
	e.claims.waitUpdate(t, hookAlloc, volID, pb.ClaimState_CLAIM_STATE_NODE_DETACHED, false)
}

// Only the listed users' uses are torn down: an alloc's use the servers
// did not list (a claim made after their check) is left published, and a
// listed operator's claim the node does not hold is answered not held.
func TestDetachLeavesUsersNotListed(t *testing.T) {
	e := newVolEnv(t, nil)
	e.claims.set(hookAlloc, claimResp(pb.ClaimState_CLAIM_STATE_READY))
	if err := e.prerun(false); err != nil {
		t.Fatal(err)
	}
	req := detachReq(false, nil)
	req.Users = []DetachUser{{ClaimID: "op-claim"}}
	res, err := e.hooks.Detach(context.Background(), req)
	if err != nil || len(res.Users) != 1 || res.Users[0].Outcome != DetachNotHeld || len(res.Allocs) != 0 || res.Unstaged {
		t.Fatalf("detach of an operator claim not held: %+v, %v; want it not held and nothing done", res, err)
	}
	if u, s := e.plugin.NodeUnpublishVolume.Count(), e.plugin.NodeUnstageVolume.Count(); u != 0 || s != 0 {
		t.Fatalf("unpublish %d, unstage %d of an unlisted alloc's use; want none", u, s)
	}
	if len(e.hooks.cfg.Volumes.Uses()) != 1 {
		t.Fatalf("uses after the detach: %+v, want the unlisted alloc's", e.hooks.cfg.Volumes.Uses())
	}
}

// A listed operator's claim whose publish is under way (no use recorded
// yet) is not answered "not held": its publish is stopped and torn down.
func TestDetachStopsAPublishUnderWay(t *testing.T) {
	e := newVolEnv(t, nil)
	pctx, end, ok := e.hooks.startPublish(context.Background(), "op-claim", volID)
	if !ok {
		t.Fatal("publish not registered")
	}
	go func() {
		<-pctx.Done() // the teardown cancels it
		end()
	}()
	req := detachReq(false, nil)
	req.Users = []DetachUser{{ClaimID: "op-claim"}}
	res, err := e.hooks.Detach(context.Background(), req)
	if err != nil || res.Users[0].Outcome != DetachDone || len(res.Claims) != 1 {
		t.Fatalf("detach during a publish: %+v, %v; want the claim torn down (done), not \"not held\"", res, err)
	}
	if len(e.hooks.publishesUnderWay()) != 0 {
		t.Fatal("publish still under way after the detach")
	}
}

// A detach that kicks while a try is running answers the next try's
// outcome, not the one under way, and leaves no kick behind that would
// skip the hour-long backoff after.
func TestDetachDuringATryAnswersTheNextTry(t *testing.T) {
	e := newVolEnv(t, func(c *VolumeConfig) {
		c.TeardownRetry, c.TeardownRetryMax, c.TeardownWait = time.Hour, time.Hour, time.Millisecond
	})
	e.claims.set(hookAlloc, claimResp(pb.ClaimState_CLAIM_STATE_READY))
	if err := e.prerun(false); err != nil {
		t.Fatal(err)
	}
	e.plugin.NodeUnpublishVolume.Next(nil, status.Error(codes.FailedPrecondition, "old try"))
	e.plugin.NodeUnpublishVolume.Next(nil, status.Error(codes.FailedPrecondition, "new try"))
	release := e.plugin.NodeUnpublishVolume.Block()
	defer release()
	_ = e.postrun() // its try hangs
	testutil.WaitFor(t, volWait, func() error {
		if e.plugin.NodeUnpublishVolume.Count() != 1 {
			return errors.New("teardown's first try not under way")
		}
		return nil
	})
	td := e.teardown(t)
	answer := make(chan DetachResult, 1)
	go func() {
		res, _ := e.hooks.Detach(context.Background(), detachReq(false, nil))
		answer <- res
	}()
	testutil.WaitFor(t, volWait, func() error {
		td.mu.Lock()
		defer td.mu.Unlock()
		if td.want < 2 {
			return errors.New("detach has not kicked yet")
		}
		return nil
	})
	release()
	res := <-answer
	if err := userErr(t, res); err == nil || !strings.Contains(err.Error(), "new try") {
		t.Fatalf("detach answered %v, want the next try's \"new try\"", err)
	}
	if u := e.plugin.NodeUnpublishVolume.Count(); u != 2 {
		t.Fatalf("unpublish %d calls, want 2", u)
	}
	td.mu.Lock()
	left := td.want > td.started || len(td.kick) > 0
	td.mu.Unlock()
	if left {
		t.Fatal("a kick is left that would skip the teardown's backoff")
	}
}

// A teardown a detach started (no task events) that an alloc's Postrun
// joins emits that alloc's task events.
func TestPostrunJoiningADetachTeardownGetsItsEvents(t *testing.T) {
	e := newVolEnv(t, func(c *VolumeConfig) {
		c.TeardownRetry, c.TeardownRetryMax, c.TeardownWait = time.Hour, time.Hour, time.Millisecond
	})
	e.claims.set(hookAlloc, claimResp(pb.ClaimState_CLAIM_STATE_READY))
	if err := e.prerun(false); err != nil {
		t.Fatal(err)
	}
	e.plugin.NodeUnpublishVolume.Next(nil, status.Error(codes.FailedPrecondition, "device busy"))
	release := e.plugin.NodeUnpublishVolume.Block()
	defer release()
	ctx, cancel := context.WithCancel(context.Background())
	answer := make(chan error, 1)
	go func() {
		res, _ := e.hooks.Detach(ctx, detachReq(false, nil))
		answer <- userErr(t, res)
	}()
	testutil.WaitFor(t, volWait, func() error {
		if e.plugin.NodeUnpublishVolume.Count() != 1 {
			return errors.New("detach's teardown try not under way")
		}
		return nil
	})
	cancel()
	if err := <-answer; err == nil {
		t.Fatal("detach cut short answered no error")
	}
	_ = e.postrun() // joins the teardown under way
	release()
	evs := e.events.waitEvents(t, EventVolumeFailure, 1)
	if !strings.Contains(evs[len(evs)-1].GetMessage(), "device busy") {
		t.Fatalf("alloc's failure event %q, want the plugin's device busy", evs[len(evs)-1].GetMessage())
	}
}

// teardown returns the only teardown under way.
func (e *volEnv) teardown(t *testing.T) *teardown {
	t.Helper()
	e.hooks.mu.Lock()
	defer e.hooks.mu.Unlock()
	for _, td := range e.hooks.teardowns {
		return td
	}
	t.Fatal("no teardown under way")
	return nil
}

// A detach of two users whose teardowns back off for an hour kicks both
// before waiting on either: both are kicked while the first's try hangs
// (the volume manager runs one call on a volume at a time, so the
// second's try waits for it).
func TestDetachKicksEveryUseBeforeWaiting(t *testing.T) {
	e := newVolEnv(t, func(c *VolumeConfig) {
		c.TeardownRetry, c.TeardownRetryMax, c.TeardownWait = time.Hour, time.Hour, time.Millisecond
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.hooks.RunOperatorClaims(ctx, e.claims)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	e.claims.set(hookAlloc, claimResp(pb.ClaimState_CLAIM_STATE_READY))
	if err := e.prerun(false); err != nil {
		t.Fatal(err)
	}
	e.claims.setOperator("c1", pb.ClaimState_CLAIM_STATE_READY)
	e.claims.waitUpdate(t, "c1", volID, pb.ClaimState_CLAIM_STATE_IN_USE, false)

	busy := status.Error(codes.FailedPrecondition, "device busy")
	e.plugin.NodeUnpublishVolume.Next(nil, busy)
	e.plugin.NodeUnpublishVolume.Next(nil, busy)
	_ = e.postrun()
	e.claims.setOperator("c1", pb.ClaimState_CLAIM_STATE_RELEASING)
	e.claims.waitUpdate(t, hookAlloc, volID, pb.ClaimState_CLAIM_STATE_RELEASING, true)
	e.claims.waitUpdate(t, "c1", volID, pb.ClaimState_CLAIM_STATE_RELEASING, true)
	before := e.plugin.NodeUnpublishVolume.Count()

	release := e.plugin.NodeUnpublishVolume.Block()
	defer release()
	req := detachReq(false, nil)
	req.Users = append(req.Users, DetachUser{ClaimID: "c1"})
	answer := make(chan DetachResult, 1)
	go func() {
		res, _ := e.hooks.Detach(context.Background(), req)
		answer <- res
	}()
	testutil.WaitFor(t, volWait, func() error {
		if n := e.plugin.NodeUnpublishVolume.Count() - before; n != 1 {
			return fmt.Errorf("%d tries at the plugin, want the first's hanging", n)
		}
		e.hooks.mu.Lock()
		defer e.hooks.mu.Unlock()
		kicked := 0
		for _, td := range e.hooks.teardowns {
			td.mu.Lock()
			if td.want > 1 {
				kicked++
			}
			td.mu.Unlock()
		}
		if kicked != 2 {
			return fmt.Errorf("%d teardowns kicked while the first try hangs, want both", kicked)
		}
		return nil
	})
	release()
	res := <-answer
	if len(res.Users) != 2 || res.Users[0].Outcome != DetachDone || res.Users[1].Outcome != DetachDone {
		t.Fatalf("detach answered %+v, want both done", res.Users)
	}
}
