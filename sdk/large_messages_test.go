package sdk

import (
	"context"
	"errors"
	"strings"
	"testing"

	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"berth.dev/berth/sdk/driverpb"
)

// olderPlugin is a plugin that speaks driver API 2 at most, as one built
// with an sdk from before APIVersionLargeMessages would: it may have kept
// gRPC's 4 MiB message limit.
type olderPlugin struct{ driverpb.DriverServer }

func (o olderPlugin) Negotiate(ctx context.Context, req *driverpb.NegotiateRequest) (*driverpb.NegotiateResponse, error) {
	resp, err := o.DriverServer.Negotiate(ctx, req)
	if err == nil {
		resp.ApiVersion = min(resp.GetApiVersion(), APIVersionLargeMessages-1)
	}
	return resp, err
}

// A start request over 4 MiB is refused before it is sent to a plugin
// that negotiated an API older than APIVersionLargeMessages, with
// ErrRequestTooLarge naming the task and the limit; the same request is
// sent to a plugin speaking the newer API, and a small one to either.
func TestLargeStartRequestNeedsAPluginThatTakesIt(t *testing.T) {
	big := &driverpb.TaskConfig{Id: "big", DriverConfig: ConfigMap{"command": StringValue(strings.Repeat("x", LegacyMaxMessageSize))}}
	small := &driverpb.TaskConfig{Id: "small", DriverConfig: ConfigMap{"command": StringValue("x")}}

	f := newFakeDriver()
	conn, server := plugin.TestGRPCConn(t, func(s *grpc.Server) {
		driverpb.RegisterDriverServer(s, olderPlugin{&grpcServer{impl: f, name: "old"}})
	})
	t.Cleanup(func() { conn.Close(); server.Stop() })
	old, err := ConnectDriver(testCtx(t), conn)
	if err != nil {
		t.Fatal(err)
	}
	if old.APIVersion() >= APIVersionLargeMessages {
		t.Fatalf("the older plugin negotiated %d", old.APIVersion())
	}
	_, err = old.StartTask(testCtx(t), big)
	var re *RPCError
	if !errors.Is(err, ErrRequestTooLarge) || !errors.As(err, &re) || re.GRPCCode() != codes.ResourceExhausted ||
		!strings.Contains(err.Error(), "task big") || !strings.Contains(err.Error(), "4194304 bytes") {
		t.Fatalf("large start on an API %d plugin = %v, want ErrRequestTooLarge naming the task and the limit", old.APIVersion(), err)
	}
	f.mu.Lock()
	starts := f.Starts
	f.mu.Unlock()
	if starts != 0 {
		t.Fatalf("the older plugin's StartTask was called %d times", starts)
	}
	if _, err := old.StartTask(testCtx(t), small); err != nil {
		t.Fatalf("small start on the older plugin: %v", err)
	}

	// A plugin speaking the current API is sent the request (this
	// in-process server keeps gRPC's default limit; taskdrivers'
	// TestTaskAsLargeAsTheLargestJobReachesTheDriver sends one to a real
	// plugin process).
	current, _ := serve(t, newFakeDriver())
	if _, err := current.StartTask(testCtx(t), big); errors.Is(err, ErrRequestTooLarge) {
		t.Fatalf("large start on an API %d plugin refused by the client: %v", current.APIVersion(), err)
	}
}
