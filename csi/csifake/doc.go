// Package csifake is a fake CSI plugin for tests: a real gRPC server on a
// unix socket whose every RPC answers as the test scripts it, so a client can
// be driven through hangs, errors and odd responses a real plugin produces
// only by accident.
//
// Each RPC of the Identity, Controller and Node services is a field of Plugin
// of type Call, which queues answers (Next), sets a standing answer (Always),
// injects latency (Delay) or hangs until released (Block), and counts and
// records requests (Count, Last, Requests):
//
//	p := csifake.New()
//	srv, err := p.Listen(filepath.Join(t.TempDir(), "csi.sock"))
//	...
//	defer srv.Stop()
//	p.NodeStageVolume.Next(nil, status.Error(codes.Unavailable, "busy"))
//	release := p.NodeUnstageVolume.Block()
//	defer release()
//	client, err := csi.Dial(srv.Endpoint)
//
// The fake is deliberately dumb: it keeps no volume state and checks nothing
// about requests, so what a test sees is only what it scripted. Stop cuts the
// socket and every connection at once, the way a plugin process dies, and
// Listen on the same path brings it back, for restart tests.
//
// It lives in a non-test package so the tests of every package that talks to
// CSI plugins can use it.
package csifake
