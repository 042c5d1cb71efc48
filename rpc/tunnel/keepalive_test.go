package tunnel

import (
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// AtLeast stretches a session's ping interval (a large cluster's TTL) but
// never shortens it, and a call's stream open still gives up after the
// base interval and timeout.
func TestKeepaliveAtLeast(t *testing.T) {
	for _, c := range []struct {
		name    string
		k       Keepalive
		every   time.Duration
		openMax time.Duration
	}{
		{"default", Keepalive{}, DefaultKeepAliveInterval, DefaultKeepAliveInterval + DefaultKeepAliveTimeout},
		{"stretched", Keepalive{AtLeast: func() time.Duration { return 4 * time.Minute }}, 4 * time.Minute,
			DefaultKeepAliveInterval + DefaultKeepAliveTimeout},
		{"not shortened", Keepalive{AtLeast: func() time.Duration { return time.Second }}, DefaultKeepAliveInterval,
			DefaultKeepAliveInterval + DefaultKeepAliveTimeout},
		{"test's own", Keepalive{Interval: 50 * time.Millisecond, Timeout: 100 * time.Millisecond}, 50 * time.Millisecond,
			150 * time.Millisecond},
	} {
		y := c.k.yamux(hclog.NewNullLogger())
		if y.KeepAliveInterval != c.every || y.StreamOpenTimeout != c.openMax {
			t.Errorf("%s: pings every %s, stream open gives up after %s; want %s and %s", c.name, y.KeepAliveInterval,
				y.StreamOpenTimeout, c.every, c.openMax)
		}
	}
}
