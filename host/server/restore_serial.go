package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"

	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/errcode"
)

// ErrRestoreInProgress is returned by SnapshotRestore while another
// snapshot restore is under way on the leader. The restores are not
// queued: the second would replace the state the first restored moments
// after its caller was told it was restored, so its caller retries once the
// first has answered, knowing what it replaces.
var ErrRestoreInProgress = errcode.New(codes.FailedPrecondition, "another snapshot restore is in progress")

// restoreGate lets one operator snapshot restore run at a time.
type restoreGate struct {
	mu  sync.Mutex
	cur *restoreRun
}

// restoreRun is the restore under way: where it came from and when.
type restoreRun struct {
	from    string
	started time.Time
}

// begin claims the gate for a restore called with ctx at now, or refuses
// (ErrRestoreInProgress, naming the restore under way). end releases it;
// calling it again does nothing.
func (g *restoreGate) begin(ctx context.Context, now time.Time) (end func(), err error) {
	run := &restoreRun{from: "unknown peer", started: now}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		run.from = p.Addr.String()
	}
	if rpc.Forwarded(ctx) {
		run.from += " (forwarded by a server)"
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if cur := g.cur; cur != nil {
		return nil, fmt.Errorf("%w on this leader: one called from %s at %s (%s ago) is still uploading or restoring; retry once it has answered",
			ErrRestoreInProgress, cur.from, cur.started.UTC().Format(time.RFC3339), now.Sub(cur.started).Round(time.Millisecond))
	}
	g.cur = run
	return func() {
		g.mu.Lock()
		if g.cur == run {
			g.cur = nil
		}
		g.mu.Unlock()
	}, nil
}
