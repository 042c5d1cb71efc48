package tunnel

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Without AtLeast yamux pings at the interval; with it the tunnel pings
// itself, each wait read anew (a session opened while the cluster was
// small slows down as it grows) and never shorter than the interval. A
// call's stream open still gives up after the base interval and timeout.
func TestKeepaliveAtLeast(t *testing.T) {
	y := Keepalive{}.yamux(hclog.NewNullLogger())
	if !y.EnableKeepAlive || y.KeepAliveInterval != DefaultKeepAliveInterval {
		t.Fatalf("default: yamux keepalive %v every %s", y.EnableKeepAlive, y.KeepAliveInterval)
	}
	var ttl atomic.Int64
	ttl.Store(int64(time.Second))
	k := Keepalive{AtLeast: func() time.Duration { return time.Duration(ttl.Load()) }}
	y = k.yamux(hclog.NewNullLogger())
	if y.EnableKeepAlive || y.StreamOpenTimeout != DefaultKeepAliveInterval+DefaultKeepAliveTimeout {
		t.Fatalf("AtLeast: yamux keepalive %v, stream open gives up after %s", y.EnableKeepAlive, y.StreamOpenTimeout)
	}
	if got := k.every(); got != DefaultKeepAliveInterval {
		t.Fatalf("AtLeast 1s: pings every %s, want the %s floor", got, DefaultKeepAliveInterval)
	}
	ttl.Store(int64(4 * time.Minute))
	if got := k.every(); got != 4*time.Minute {
		t.Fatalf("AtLeast grown to 4m: pings every %s", got)
	}
}

// With AtLeast, a session whose node never answers pings still closes.
func TestPingLoopClosesADeadSession(t *testing.T) {
	ka := fast
	ka.AtLeast = func() time.Duration { return 0 }
	srv := startServer(t, "s1", "127.0.0.1:0", ka)
	rawOpen(t, srv, "dead")
	sess := srv.session(t, "dead")
	select {
	case <-sess.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a session whose node never answers pings stayed open")
	}
}
