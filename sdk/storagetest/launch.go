package storagetest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"

	hclog "github.com/hashicorp/go-hclog"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/internal/testenv"
)

// process is one adapter process the harness launched.
type process struct {
	p   *sdk.StoragePlugin
	cmd *exec.Cmd
}

// command returns the adapter's command with the environment berth gives
// an adapter: its config, node and data dir (kept across the adapter
// processes of one run, as berth keeps it across restarts).
func (s *suite) command() *exec.Cmd {
	var cmd *exec.Cmd
	if s.h.Command != nil {
		cmd = s.h.Command()
	} else {
		cmd = SelfCommand()
	}
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, Env(s.h.Config, s.dataDir)...)
	return cmd
}

// Env is the environment berth gives an adapter (sdk.StorageAdapterEnv)
// with config and data dir, on the harness's node.
func Env(config []byte, dataDir string) []string {
	if len(config) == 0 {
		config = []byte("{}")
	}
	return []string{
		sdk.EnvStorageConfig + "=" + string(config),
		sdk.EnvStorageNodeID + "=" + NodeID,
		sdk.EnvStorageNodeName + "=" + NodeName,
		sdk.EnvStorageDataDir + "=" + dataDir,
	}
}

// launch starts an adapter process over go-plugin, as berth does; it is
// killed when Run's test ends. The caller fails its own test on error
// (a subtest may not end its parent).
func (s *suite) launch() (*process, error) {
	cmd := s.command()
	ctx, cancel := context.WithTimeout(context.Background(), s.h.Timeout)
	defer cancel()
	p, err := sdk.LaunchStorageAdapter(ctx, sdk.LaunchConfig{Name: s.h.Name, Cmd: cmd, Logger: s.logger})
	if err != nil {
		return nil, fmt.Errorf("launch storage adapter %s (%s): %w (a test binary serving itself needs storagetest.ServeIfAdapter in TestMain)", s.h.Name, cmd.Path, err)
	}
	s.top.Cleanup(p.Kill)
	return &process{p: p, cmd: cmd}, nil
}

// Launch starts the adapter cmd (SelfCommand() when nil) over real
// go-plugin with the environment Env(config, a fresh temp dir) added, and
// returns it; it is killed when the test ends. For an author's own tests
// of what the harness does not check.
func Launch(t testing.TB, name string, cmd *exec.Cmd, config []byte) *sdk.StoragePlugin {
	t.Helper()
	if cmd == nil {
		cmd = SelfCommand()
	}
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, Env(config, t.TempDir())...)
	ctx, cancel := context.WithTimeout(context.Background(), defaultTimeout)
	defer cancel()
	p, err := sdk.LaunchStorageAdapter(ctx, sdk.LaunchConfig{Name: name, Cmd: cmd, Logger: Logger(t)})
	if err != nil {
		t.Fatalf("launch storage adapter %s (%s): %v", name, cmd.Path, err)
	}
	t.Cleanup(p.Kill)
	return p
}

// Logger returns a logger that writes to t.Log, and drops what is logged
// after the test (an adapter's last words) instead of panicking.
func Logger(t testing.TB) hclog.Logger { return testenv.Logger(t) }
