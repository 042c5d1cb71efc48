//go:build linux

package hostpath

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"

)

// minSanityPassed is the number of csi-sanity specs (of 103 in v5.6.0) the
// plugin must pass; SANITY.md lists the ones it skips and why.
const minSanityPassed = 80

// sanityAccessTypeEnv set to "block" makes TestSanity run the suite with
// block access (loop devices) instead of mount access.
const sanityAccessTypeEnv = "BERTH_HOSTPATH_SANITY_ACCESS_TYPE"

// TestSanity runs the kubernetes-csi conformance suite (csi-sanity v5.6.0)
// against a monolith plugin on a unix socket and fails on any failed spec or
// on fewer than minSanityPassed passed ones.
func TestSanity(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("csi-sanity needs root: NodeStageVolume and NodePublishVolume bind-mount")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := Start(ctx, Config{
		Endpoint:   filepath.Join(dir, "csi.sock"),
		NodeID:     "sanity-node",
		StateDir:   filepath.Join(dir, "state"),
		Capacity:   100 << 30,
		MaxVolumes: 8,
		Topology:   map[string]string{"zone": "z1"},
		Logger:     testLogger(t, hclog.Info),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()

	cfg := sanity.NewTestConfig()
	cfg.Address = srv.Endpoint()
	cfg.TargetPath = filepath.Join(dir, "target")
	cfg.StagingPath = filepath.Join(dir, "staging")
	cfg.TestVolumeSize = 16 << 20
	cfg.TestVolumeExpandSize = 32 << 20
	cfg.TestNodeVolumeAttachLimit = true
	cfg.TestVolumeMutableParameters = map[string]string{ParamMode: "0770"}
	if os.Getenv(sanityAccessTypeEnv) == "block" {
		cfg.TestVolumeAccessType = "block"
		cfg.TestVolumeMutableParameters = nil
	}

	var report ginkgo.Report
	ginkgo.ReportAfterSuite("spec counts", func(r ginkgo.Report) { report = r })
	start := time.Now()
	sanity.Test(t, cfg)
	took := time.Since(start)

	var passed, failed, skipped, pending int
	for _, s := range report.SpecReports {
		if s.LeafNodeType != types.NodeTypeIt {
			continue
		}
		switch {
		case s.State == types.SpecStatePassed:
			passed++
		case s.State == types.SpecStatePending:
			pending++
		case s.State == types.SpecStateSkipped:
			skipped++
		case s.State.Is(types.SpecStateFailureStates):
			failed++
			t.Errorf("csi-sanity spec failed: %s: %s", s.FullText(), s.Failure.Message)
		}
	}
	t.Logf("csi-sanity: %d specs: %d passed, %d failed, %d skipped, %d pending, in %v",
		report.PreRunStats.TotalSpecs, passed, failed, skipped, pending, took.Round(time.Second))
	if report.PreRunStats.TotalSpecs == 0 {
		t.Fatal("csi-sanity reported no specs: the suite did not run")
	}
	if failed > 0 || passed < minSanityPassed {
		t.Errorf("csi-sanity: %d passed and %d failed; want at least %d passed and none failed", passed, failed, minSanityPassed)
	}
}

// TestSanityBlock runs the suite again with block access. Ginkgo runs one
// suite per process, so it re-executes this test binary for TestSanity with
// sanityAccessTypeEnv=block; the child fails on the same terms.
func TestSanityBlock(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("csi-sanity needs root: block volumes attach loop devices")
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skipf("block volumes need loop devices: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSanity$", "-test.count=1", "-test.v", "-test.timeout=10m")
	cmd.Env = append(os.Environ(), sanityAccessTypeEnv+"=block")
	out, err := cmd.CombinedOutput()
	summary := regexp.MustCompile(`csi-sanity: \d+ specs: [^\n]*`).Find(out)
	if err != nil || summary == nil {
		t.Fatalf("csi-sanity with block access failed: %v\n%s", err, out)
	}
	t.Logf("block access: %s", summary)
}
