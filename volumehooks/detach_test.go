package volumehooks

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

func detachReq(live bool, plugin error) DetachRequest {
	return DetachRequest{VolumeID: volID, Live: func(string) bool { return live }, NodePlugin: func(string) error { return plugin }}
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
	if err != nil || res.PluginID != "" || len(res.Allocs) != 0 || res.Unstaged {
		t.Fatalf("second detach: %+v, %v; want nothing done", res, err)
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
	_, err := e.hooks.Detach(ctx, detachReq(false, nil))
	if err == nil || !strings.Contains(err.Error(), "device busy") || errcode.Code(err) != codes.FailedPrecondition || ctx.Err() != nil {
		t.Fatalf("detach of a teardown that fails: %v, want the plugin's FailedPrecondition at once", err)
	}
	if u := e.plugin.NodeUnpublishVolume.Count(); u != 2 {
		t.Fatalf("unpublish %d calls, want 2 (the failed teardown's, the detach's)", u)
	}
	res, err := e.hooks.Detach(ctx, detachReq(false, nil))
	if err != nil || len(res.Allocs) != 1 || !res.Unstaged {
		t.Fatalf("detach once the plugin lets go: %+v, %v", res, err)
	}
	if u, s := e.plugin.NodeUnpublishVolume.Count(), e.plugin.NodeUnstageVolume.Count(); u != 3 || s != 1 {
		t.Fatalf("unpublish %d, unstage %d; want 3 and 1", u, s)
	}
	e.claims.waitUpdate(t, hookAlloc, volID, pb.ClaimState_CLAIM_STATE_NODE_DETACHED, false)
}
