package storagetest

import (
	"bytes"
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"berth.dev/berth/sdk"
)

// use makes p the process the checks call.
func (s *suite) use(p *process) {
	s.proc = p
	s.conn = p.p.Adapter().Conn()
	s.id = csipb.NewIdentityClient(s.conn)
	s.ctl = csipb.NewControllerClient(s.conn)
	s.node = csipb.NewNodeClient(s.conn)
}

// checkRestart: a volume staged and published by one adapter process is
// torn down by the next, after the first was killed with SIGKILL (berth
// restarts a dead adapter with the same data dir and carries on, and
// repeats a publish whose answer it lost). The new process has the same
// node ID, publishing again at the same target is OK, the volume's data is
// there, and unpublish, unstage, detach and delete succeed.
func checkRestart(t *testing.T, s *suite) {
	if s.nodeCaps == nil {
		t.Skip("the adapter serves no node")
	}
	s.requireNodeRoot(t)
	v := s.lifecycleVolume(t)
	pc := s.attach(t, v)
	staging, target := paths(t)
	s.stage(t, v, pc, staging)
	s.publish(t, v, pc, staging, target)
	s.writeData(t, target, v.id)

	old := s.proc
	if err := syscall.Kill(old.p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 adapter %d: %v", old.p.Pid(), err)
	}
	select {
	case <-old.p.Adapter().Done():
	case <-time.After(s.h.Timeout):
		t.Fatalf("adapter %d still running %s after SIGKILL", old.p.Pid(), s.h.Timeout)
	}
	p, err := s.launch()
	if err != nil {
		t.Fatal(err)
	}
	s.use(p)
	checkProbeReady(t, s)
	ctx, cancel := s.ctx()
	defer cancel()
	if s.nodeID != "" {
		info, err := s.node.NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
		if err != nil || info.GetNodeId() != s.nodeID {
			t.Errorf("NodeGetInfo of the restarted adapter = %v, %v; want node ID %q as before (berth attached volumes to it)", info, err, s.nodeID)
		}
	}
	s.publish(t, v, pc, staging, target)
	s.readData(t, target, v.id)
	s.unpublish(t, v, target)
	s.unstage(t, v, staging)
	s.detach(t, v)
	if s.creates() {
		s.deleteVolume(t, v)
	}
}

// checkOutsideBerth: the adapter started without berth's handshake (by
// hand, or by a CO that is not berth) exits with an error at once rather
// than serving or hanging.
func checkOutsideBerth(t *testing.T, s *suite) {
	cmd := s.command()
	env := cmd.Env[:0:0]
	for _, kv := range cmd.Env {
		if !strings.HasPrefix(kv, sdk.StorageHandshake.MagicCookieKey+"=") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("adapter started without berth's handshake exited 0, want an error; output:\n%s", out.String())
		}
	case <-time.After(s.h.Timeout):
		_ = cmd.Process.Kill()
		<-done
		t.Errorf("adapter started without berth's handshake still running after %s; output:\n%s", s.h.Timeout, out.String())
	}
}

// checkShutdown: when berth shuts the adapter down (go-plugin's graceful
// shutdown), it exits by itself with status 0, before go-plugin gives up
// waiting and kills it.
func checkShutdown(t *testing.T, s *suite) {
	p := s.proc
	ctx, cancel := context.WithTimeout(context.Background(), s.h.Timeout)
	defer cancel()
	if _, err := s.id.Probe(ctx, &csipb.ProbeRequest{}); err != nil || p.p.Exited() {
		t.Fatalf("the adapter is not serving before the shutdown (Probe: %v; exited: %v)", err, p.p.Exited())
	}
	done := make(chan struct{})
	go func() {
		p.p.Kill()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("shutting the adapter down took more than %s", s.h.Timeout)
	}
	// Kill returns after go-plugin's wait for the process returned.
	st := p.cmd.ProcessState
	switch {
	case st == nil:
		t.Fatal("the adapter process was not waited for")
	case !st.Exited():
		t.Errorf("the adapter did not exit when berth shut it down and was killed (%v)", st)
	case st.ExitCode() != 0:
		t.Errorf("the adapter exited with status %d when berth shut it down, want 0", st.ExitCode())
	}
	if !p.p.Exited() {
		t.Error("go-plugin does not see the adapter as exited")
	}
}
