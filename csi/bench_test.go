package csi_test

import (
	"context"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"berth.dev/berth/csi"
)

// quiet keeps logging out of the measurements.
var quiet = csi.WithLogger(hclog.NewNullLogger())

// BenchmarkNodeGetCapabilities compares a round trip through the client with
// the generated gRPC client on the same connection to the fake plugin; the
// difference is what deadlines, classification and typed results cost.
func BenchmarkNodeGetCapabilities(b *testing.B) {
	_, srv, _ := startFake(b, quiet)
	cc, err := grpc.NewClient("unix://"+srv.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	ctx := context.Background()
	b.Run("raw", func(b *testing.B) {
		raw := csipb.NewNodeClient(cc)
		for b.Loop() {
			if _, err := raw.NodeGetCapabilities(ctx, &csipb.NodeGetCapabilitiesRequest{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("berth", func(b *testing.B) {
		c := csi.New(cc)
		for b.Loop() {
			if _, err := c.Node.NodeGetCapabilities(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkNodeStageError measures the failure path: classification and the
// scrubbing of secrets out of the plugin's message.
func BenchmarkNodeStageError(b *testing.B) {
	p, _, c := startFake(b, quiet)
	p.NodeStageVolume.Always(nil, status.Error(codes.Unavailable, "backend busy"))
	req := &csipb.NodeStageVolumeRequest{VolumeId: "v1", StagingTargetPath: "/s", VolumeCapability: rwCap,
		Secrets: map[string]string{"password": secret}}
	ctx := context.Background()
	for b.Loop() {
		if _, err := c.Node.NodeStageVolume(ctx, req); !csi.IsUncertain(err) {
			b.Fatal(err)
		}
	}
}

func BenchmarkRedact(b *testing.B) {
	req := &csipb.NodePublishVolumeRequest{
		VolumeId: "v1", StagingTargetPath: "/staging/v1", TargetPath: "/publish/a1/v1", VolumeCapability: rwCap,
		PublishContext: map[string]string{"device": "/dev/sdb"}, VolumeContext: map[string]string{"pool": "p1"},
		Secrets: map[string]string{"user": "admin", "password": secret},
	}
	for b.Loop() {
		_ = csi.RedactedString(req)
	}
}

func BenchmarkIsUncertain(b *testing.B) {
	err := &csi.Error{Call: csi.CallNodeStageVolume, VolumeID: "v1", Code: codes.Aborted}
	for b.Loop() {
		if !csi.IsUncertain(err) {
			b.Fatal("Aborted must be uncertain")
		}
	}
}

// memConn answers every call at once with an empty response: what remains
// of a call's cost is the client's own work, without any transport.
type memConn struct{}

func (memConn) Invoke(context.Context, string, any, any, ...grpc.CallOption) error { return nil }

func (memConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Error(codes.Unimplemented, "no streams")
}

// BenchmarkClientOverhead isolates what the client adds to a call (deadline,
// validation, typed result) from the transport. The raw call carries no
// deadline, so most of the difference is the deadline's timer.
func BenchmarkClientOverhead(b *testing.B) {
	ctx := context.Background()
	b.Run("raw", func(b *testing.B) {
		raw := csipb.NewNodeClient(memConn{})
		for b.Loop() {
			if _, err := raw.NodeGetCapabilities(ctx, &csipb.NodeGetCapabilitiesRequest{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("berth", func(b *testing.B) {
		c := csi.New(memConn{})
		for b.Loop() {
			if _, err := c.Node.NodeGetCapabilities(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("berth-stage", func(b *testing.B) {
		c := csi.New(memConn{})
		req := &csipb.NodeStageVolumeRequest{VolumeId: "v1", StagingTargetPath: "/s", VolumeCapability: rwCap}
		for b.Loop() {
			if _, err := c.Node.NodeStageVolume(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
