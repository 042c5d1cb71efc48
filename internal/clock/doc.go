// Package clock is berth's one source of time for code that arms timers:
// the server's leader loops (heartbeats, the broker's nacks) and the
// client's csi_plugin supervisor take a Clock, so their tests drive time
// by hand (internal/testutil.ManualClock) instead of sleeping.
package clock
