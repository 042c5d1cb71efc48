package csifake_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"berth.dev/berth/csi/csifake"
)

func serve(t *testing.T) (*csifake.Plugin, *csifake.Server, *grpc.ClientConn) {
	t.Helper()
	dir, err := os.MkdirTemp("", "csifake")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := csifake.New()
	srv, err := p.Listen(filepath.Join(dir, "csi.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(srv.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return p, srv, cc
}

func TestScriptedAnswers(t *testing.T) {
	p, _, cc := serve(t)
	node := csipb.NewNodeClient(cc)
	ctx := context.Background()
	stage := func(id string) error {
		_, err := node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id})
		return err
	}

	p.NodeStageVolume.Next(nil, status.Error(codes.Aborted, "first"))
	p.NodeStageVolume.Next(nil, status.Error(codes.Internal, "second"))
	p.NodeStageVolume.Always(nil, status.Error(codes.NotFound, "always"))
	for i, want := range []codes.Code{codes.Aborted, codes.Internal, codes.NotFound, codes.NotFound} {
		if got := status.Code(stage("v" + string(rune('1'+i)))); got != want {
			t.Errorf("call %d: code %s, want %s", i+1, got, want)
		}
	}
	if n := p.NodeStageVolume.Count(); n != 4 {
		t.Errorf("Count = %d, want 4", n)
	}
	if last := p.NodeStageVolume.Last(); last.GetVolumeId() != "v4" {
		t.Errorf("Last = %v", last)
	}
	reqs := p.NodeStageVolume.Requests()
	if len(reqs) != 4 || reqs[0].GetVolumeId() != "v1" {
		t.Errorf("Requests = %v", reqs)
	}
	p.NodeStageVolume.Always(nil, nil)
	if err := stage("v5"); err != nil {
		t.Errorf("Always(nil, nil) must answer with an empty response, got %v", err)
	}
	if p.NodeUnstageVolume.Count() != 0 || p.NodeUnstageVolume.Last() != nil {
		t.Error("an uncalled RPC has a count or a request")
	}

	info, err := csipb.NewIdentityClient(cc).GetPluginInfo(ctx, &csipb.GetPluginInfoRequest{})
	if err != nil || info.GetName() != csifake.Name || info.GetVendorVersion() != csifake.VendorVersion {
		t.Errorf("default GetPluginInfo: %v, %v", info, err)
	}
}

func TestBlockAndDelay(t *testing.T) {
	p, _, cc := serve(t)
	id := csipb.NewIdentityClient(cc)

	release := p.Probe.Block()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err := id.Probe(ctx, &csipb.ProbeRequest{})
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("blocked call: got %v, want DeadlineExceeded", err)
	}
	before := p.Probe.Count()
	done := make(chan error, 1)
	go func() {
		_, err := id.Probe(context.Background(), &csipb.ProbeRequest{})
		done <- err
	}()
	for deadline := time.Now().Add(time.Minute); p.Probe.Count() == before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the call never reached the plugin")
		}
	}
	select {
	case err := <-done:
		t.Fatalf("call returned before release: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	release()
	release() // twice is harmless
	if err := <-done; err != nil {
		t.Fatalf("released call: %v", err)
	}
	if _, err := id.Probe(context.Background(), &csipb.ProbeRequest{}); err != nil {
		t.Fatalf("call after release: %v", err)
	}

	p.Probe.Delay(time.Hour)
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := id.Probe(ctx, &csipb.ProbeRequest{}); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("delayed call: got %v, want DeadlineExceeded", err)
	}
}

func TestStopAndRelisten(t *testing.T) {
	p, srv, cc := serve(t)
	srv.Stop()
	srv.Stop() // twice is harmless
	if _, err := os.Stat(srv.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket still there after Stop: %v", err)
	}
	if _, err := csipb.NewIdentityClient(cc).Probe(context.Background(), &csipb.ProbeRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("call to a stopped plugin: %v", err)
	}
	srv2, err := p.Listen(srv.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer srv2.Stop()
	cc2, err := grpc.NewClient(srv2.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc2.Close()
	if _, err := csipb.NewIdentityClient(cc2).Probe(context.Background(), &csipb.ProbeRequest{}); err != nil {
		t.Fatalf("call to the restarted plugin: %v", err)
	}
	if n := p.Probe.Count(); n != 1 {
		t.Errorf("Count across restart = %d, want 1", n)
	}
}
