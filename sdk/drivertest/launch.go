package drivertest

import (
	"context"
	"os/exec"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/internal/testenv"
)

// Launch starts the plugin cmd (SelfCommand() when nil) over real
// go-plugin and returns it; it is killed when the test ends.
func Launch(t testing.TB, cmd *exec.Cmd) *sdk.DriverPlugin {
	t.Helper()
	if cmd == nil {
		cmd = SelfCommand()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := sdk.LaunchDriver(ctx, sdk.LaunchConfig{Name: "driver-under-test", Cmd: cmd, Logger: Logger(t)})
	if err != nil {
		t.Fatalf("launch driver plugin %s: %v (a test binary serving itself needs drivertest.ServeIfPlugin in TestMain)", cmd.Path, err)
	}
	t.Cleanup(p.Kill)
	return p
}

// InProcess serves d over gRPC on loopback inside the test process and
// returns its client: the whole protocol path (encoding, error codes,
// streams) without a subprocess.
func InProcess(t testing.TB, d sdk.Driver) *sdk.DriverClient {
	t.Helper()
	conn, server := plugin.TestGRPCConn(t, func(s *grpc.Server) { sdk.RegisterDriver(s, d) })
	t.Cleanup(func() {
		conn.Close()
		server.Stop()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := sdk.ConnectDriver(ctx, conn)
	if err != nil {
		t.Fatalf("connect to in-process driver: %v", err)
	}
	return c
}

// Logger returns a logger that writes to t.Log, and drops what is logged
// after the test (a plugin's last words) instead of panicking.
func Logger(t testing.TB) hclog.Logger { return testenv.Logger(t) }
