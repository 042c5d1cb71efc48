// Package volumetest holds test doubles for the servers' CSI controller
// calls, shared by the volume loops' tests (host/server/volumeloops) and
// the server's cluster tests (host/server): Controller is a hand-written
// controller caller that records each call, answers from per-method queues
// of errors, and keeps what is published the way a real controller would;
// EBSController and EBSNode are the plugin instances those tests report.
//
// Only tests import it.
package volumetest
