package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/host/agent"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/internal/version"
)

// berth runs the CLI in-process and returns exit code, stdout and stderr.
func berth(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(append([]string{"berth"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestVersion(t *testing.T) {
	code, out, _ := berth(t, "version")
	if code != 0 || out != "berth v"+version.Version+"\n" {
		t.Fatalf("version: exit %d, %q", code, out)
	}
}

func TestRunArgumentErrors(t *testing.T) {
	code, _, errOut := berth(t, "run")
	if code != exitUsage || !strings.Contains(errOut, "needs -dev or at least one -config") {
		t.Fatalf("run without config: exit %d, stderr %q", code, errOut)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.hcl")
	src := "name = \"x\"\ndata_dir = \"/tmp/x\"\nserver {\n  enabled = true\n  bootstap_expect = 3\n}\n"
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = berth(t, "run", "-config", path)
	if code != 1 || !strings.Contains(errOut, "bad.hcl:5") || !strings.Contains(errOut, "bootstap_expect") {
		t.Fatalf("run with a misspelt key: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = berth(t, "run", "-config", filepath.Join(dir, "missing.hcl"))
	if code != 1 || !strings.Contains(errOut, "missing.hcl") {
		t.Fatalf("run with a missing file: exit %d, stderr %q", code, errOut)
	}
}

func TestUnreachableAgentIsAnError(t *testing.T) {
	code, _, errOut := berth(t, "node", "status", "-address", "127.0.0.1:1")
	if code != 1 || !strings.HasPrefix(errOut, "Error: ") || !strings.Contains(errOut, "127.0.0.1:1") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

func startAgent(t *testing.T) *agent.Agent {
	t.Helper()
	cfg := agent.DevConfig()
	cfg.Ports = agent.Ports{} // port 0: free ports, no race with other tests
	a, err := agent.New(cfg, testutil.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Shutdown)
	testutil.WaitFor(t, 20*time.Second, func() error {
		if !a.Client().Registered() {
			return fmt.Errorf("node not registered")
		}
		return nil
	})
	return a
}

func TestReadCommandsAgainstAnAgent(t *testing.T) {
	a := startAgent(t)
	t.Setenv("BERTH_ADDR", "http://"+a.HTTPAddr())
	nodeID := a.Client().NodeID()

	code, out, errOut := berth(t, "node", "status")
	if code != 0 || !strings.Contains(out, nodeID[:8]) || !strings.Contains(out, "ready") {
		t.Fatalf("node status: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = berth(t, "node", "status", "-json")
	var nodes []struct{ ID string }
	if err := json.Unmarshal([]byte(out), &nodes); code != 0 || err != nil || len(nodes) != 1 || nodes[0].ID != nodeID {
		t.Fatalf("node status -json: exit %d, %v, %q", code, err, out)
	}
	code, out, _ = berth(t, "node", "status", "-verbose", nodeID[:6])
	if code != 0 || !strings.Contains(out, "ID                  = "+nodeID) || !strings.Contains(out, "Status              = ready") {
		t.Fatalf("node status ID: exit %d\n%s", code, out)
	}
	code, _, errOut = berth(t, "node", "status", "ffffffff")
	if code != 1 || !strings.Contains(errOut, `no node with ID or prefix "ffffffff"`) {
		t.Fatalf("unknown node: exit %d, %q", code, errOut)
	}

	code, out, _ = berth(t, "server", "members")
	if code != 0 || !strings.Contains(out, "alive") || !strings.Contains(out, a.Server().RaftAddr()) {
		t.Fatalf("server members: exit %d\n%s", code, out)
	}
	code, out, _ = berth(t, "operator", "raft", "list-peers")
	if code != 0 || !strings.Contains(out, "leader") || !strings.Contains(out, a.Server().ID()) {
		t.Fatalf("list-peers: exit %d\n%s", code, out)
	}
	code, _, errOut = berth(t, "server", "force-leave")
	if code != exitUsage || !strings.Contains(errOut, "exactly one") {
		t.Fatalf("force-leave without argument: exit %d, %q", code, errOut)
	}

	snap := filepath.Join(t.TempDir(), "state.snap")
	code, out, errOut = berth(t, "operator", "snapshot", "save", snap)
	if code != 0 || !strings.Contains(out, "Saved snapshot") {
		t.Fatalf("snapshot save: exit %d %s%s", code, out, errOut)
	}
	code, out, errOut = berth(t, "operator", "snapshot", "restore", snap)
	if code != 0 || !strings.Contains(out, "Restored snapshot") {
		t.Fatalf("snapshot restore: exit %d %s%s", code, out, errOut)
	}
	code, _, errOut = berth(t, "operator", "snapshot", "restore", filepath.Join(t.TempDir(), "none"))
	if code != 1 || !strings.Contains(errOut, "no such file") {
		t.Fatalf("restore of a missing file: exit %d, %q", code, errOut)
	}
}
