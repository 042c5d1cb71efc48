package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"berth.dev/berth/csi/adapters"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// TestDevAgentRunsHostpathAdapter: `berth run -dev` runs the built-in
// hostpath storage adapter, with its state under the data dir and the
// node's ID as its CSI node ID; shutting the agent down stops it.
func TestDevAgentRunsHostpathAdapter(t *testing.T) {
	a := startAgent(t, DevConfig())
	if a.Adapters() == nil {
		t.Fatal("dev agent has no storage adapters")
	}
	h, err := a.Adapters().Adapter("hostpath")
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 60*time.Second, func() error {
		if st := h.State(); !st.Healthy {
			return errors.New(st.Reason)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ni, err := csipb.NewNodeClient(h.Conn()).NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
	if err != nil || ni.GetNodeId() != a.Client().NodeID() {
		t.Fatalf("NodeGetInfo = %v, %v; want node %s", ni, err, a.Client().NodeID())
	}
	// The plugin manager fingerprints the adapter and the server's plugin
	// table has it: a monolith adapter, one healthy instance each side.
	testutil.WaitFor(t, 60*time.Second, func() error {
		p, err := a.Server().State().CSIPluginByID(nil, "hostpath")
		if err != nil || p == nil {
			return fmt.Errorf("hostpath not in the plugin table: %v", err)
		}
		inst := p.GetNodes()[a.Client().NodeID()]
		if p.GetControllersHealthy() != 1 || p.GetNodesHealthy() != 1 || !p.GetSchedulable() ||
			inst.GetSource() != pb.CSIPluginSource_CSI_PLUGIN_SOURCE_ADAPTER || inst.GetNodeInfo().GetId() != a.Client().NodeID() {
			return fmt.Errorf("hostpath plugin %v: want one healthy adapter instance each side, node ID %s", p, a.Client().NodeID())
		}
		return nil
	})
	if !strings.HasPrefix(adapters.DataDir(a.DataDir(), "hostpath"), filepath.Join(a.DataDir(), "csi")) {
		t.Errorf("adapter data dir outside the agent's csi dir")
	}
	pid := h.State().Pid
	a.Shutdown()
	testutil.WaitFor(t, 30*time.Second, func() error {
		if alive(pid) {
			return errors.New("adapter still running after agent shutdown")
		}
		return nil
	})
}

// TestAgentRefusesInvalidAdapterConfig: a bad built-in adapter config
// stops the agent, naming the plugin block.
func TestAgentRefusesInvalidAdapterConfig(t *testing.T) {
	cfg := DevConfig()
	cfg.Ports = Ports{}
	cfg.Plugins["hostpath"] = &PluginConfig{Name: "hostpath", Type: PluginTypeCSI, Config: map[string]any{"capacity": "lots"}, Source: "agent.hcl:4"}
	_, err := New(cfg, testutil.Logger(t))
	if !errors.Is(err, adapters.ErrInvalidConfig) || !strings.Contains(err.Error(), "agent.hcl:4") || !strings.Contains(err.Error(), "capacity") {
		t.Fatalf("New = %v, want the invalid capacity at agent.hcl:4", err)
	}
}

func alive(pid int) bool { return pid > 0 && syscall.Kill(pid, 0) == nil }
