package csi_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/csi"
	"berth.dev/berth/csi/csifake"
)

// deadlineConn is a connection that answers nothing but records the time
// left before each call's deadline, by method.
type deadlineConn struct {
	mu   sync.Mutex
	left map[string]time.Duration
}

func (d *deadlineConn) Invoke(ctx context.Context, method string, _, _ any, _ ...grpc.CallOption) error {
	dl, ok := ctx.Deadline()
	d.mu.Lock()
	defer d.mu.Unlock()
	if ok {
		d.left[method[strings.LastIndex(method, "/")+1:]] = time.Until(dl)
	}
	return status.Error(codes.Internal, "recorded")
}

func (d *deadlineConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Error(codes.Unimplemented, "no streams")
}

// TestEachCallUsesItsOwnDeadline gives every call a different deadline and
// checks each method applies its own, then checks the defaults.
func TestEachCallUsesItsOwnDeadline(t *testing.T) {
	// Slack for a slow machine between setting the deadline and reading it.
	const slack = 20 * time.Second
	check := func(t *testing.T, c *csi.Client, conn *deadlineConn, want csi.Timeouts) {
		for _, cc := range allCalls(csifake.New()) {
			_ = cc.do(context.Background(), c)
			left, ok := conn.left[string(cc.call)]
			if !ok {
				t.Errorf("%s: made without a deadline", cc.call)
				continue
			}
			if w := want[cc.call]; left > w || left < w-slack {
				t.Errorf("%s: deadline %v away, want %v", cc.call, left, w)
			}
		}
	}
	t.Run("configured", func(t *testing.T) {
		conn := &deadlineConn{left: map[string]time.Duration{}}
		want := csi.Timeouts{}
		for i, cc := range allCalls(csifake.New()) {
			want[cc.call] = time.Duration(i+1) * time.Minute
		}
		check(t, csi.New(conn, csi.WithTimeouts(want)), conn, want)
	})
	t.Run("defaults", func(t *testing.T) {
		conn := &deadlineConn{left: map[string]time.Duration{}}
		defaults := csi.DefaultTimeouts()
		if defaults[csi.CallProbe] <= 0 || defaults[csi.CallProbe] > 10*time.Second {
			t.Errorf("Probe default %v: a health check must fail fast", defaults[csi.CallProbe])
		}
		check(t, csi.New(conn), conn, defaults)
	})
	t.Run("partial override keeps the other defaults", func(t *testing.T) {
		conn := &deadlineConn{left: map[string]time.Duration{}}
		want := csi.DefaultTimeouts()
		want[csi.CallNodeStageVolume] = 7 * time.Hour
		check(t, csi.New(conn, csi.WithTimeouts(csi.Timeouts{csi.CallNodeStageVolume: 7 * time.Hour})), conn, want)
	})
	t.Run("zero override falls back to two minutes", func(t *testing.T) {
		conn := &deadlineConn{left: map[string]time.Duration{}}
		want := csi.DefaultTimeouts()
		want[csi.CallProbe] = 2 * time.Minute
		want[csi.CallCreateVolume] = 2 * time.Minute
		check(t, csi.New(conn, csi.WithTimeouts(csi.Timeouts{csi.CallProbe: 0, csi.CallCreateVolume: -time.Second})), conn, want)
	})
}
