//go:build linux

package hostpath

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"

	"berth.dev/berth/internal/testutil"
)

// minSanityPassed is the number of csi-sanity specs (of 103 in v5.6.0) the
// plugin must pass; SANITY.md lists the ones it skips and why.
const minSanityPassed = 80

// sanityAccessTypeEnv tells TestSanitySuiteInChild which access type to test.
// Its presence also marks the process as a child started by TestSanity or
// TestSanityBlock.
const sanityAccessTypeEnv = "BERTH_HOSTPATH_SANITY_ACCESS_TYPE"

// TestSanity runs the kubernetes-csi conformance suite (csi-sanity v5.6.0)
// against a monolith plugin with mount access, and fails on any failed spec
// or on fewer than minSanityPassed passed ones.
func TestSanity(t *testing.T) { runSanityChild(t, "mount") }

// TestSanityBlock runs the suite with block access (loop devices).
func TestSanityBlock(t *testing.T) {
	requireLoopDevices(t)
	runSanityChild(t, "block")
}

var countsLine = regexp.MustCompile(`csi-sanity counts: total=(\d+) passed=(\d+) failed=(\d+) skipped=(\d+) pending=(\d+) seconds=(\d+)`)

// runSanityChild runs the suite in a child process (this test binary, only
// TestSanitySuiteInChild): Ginkgo runs one suite per process and refuses
// go test -count, and the child keeps both limits away from the other tests.
func runSanityChild(t *testing.T, accessType string) {
	testutil.RequireRoot(t, "csi-sanity's NodeStageVolume and NodePublishVolume bind-mount and attach loop devices")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSanitySuiteInChild$", "-test.count=1", "-test.v", "-test.timeout=10m")
	cmd.Env = append(os.Environ(), sanityAccessTypeEnv+"="+accessType)
	out, err := cmd.CombinedOutput()
	m := countsLine.FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("csi-sanity with %s access failed: %v\n%s", accessType, err, out)
	}
	n := func(i int) int { v, _ := strconv.Atoi(string(m[i])); return v }
	t.Logf("csi-sanity, %s access: %d specs: %d passed, %d failed, %d skipped, %d pending, in %ds",
		accessType, n(1), n(2), n(3), n(4), n(5), n(6))
	if n(3) > 0 || n(2) < minSanityPassed {
		t.Fatalf("csi-sanity with %s access: %d passed and %d failed; want at least %d passed and none failed\n%s",
			accessType, n(2), n(3), minSanityPassed, out)
	}
}

// TestSanitySuiteInChild is the suite itself, run only in the child process
// that runSanityChild starts.
func TestSanitySuiteInChild(t *testing.T) {
	accessType := os.Getenv(sanityAccessTypeEnv)
	if accessType == "" {
		t.Skip("runs only as the child process of TestSanity and TestSanityBlock")
	}
	dir := t.TempDir()
	srv, err := Start(context.Background(), Config{
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
	cfg.TestVolumeAccessType = accessType
	if accessType == "mount" {
		// ControllerModifyVolume changes a mount volume's root; block
		// volumes have no mutable parameters.
		cfg.TestVolumeMutableParameters = map[string]string{ParamMode: "0770"}
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
			t.Logf("pending (disabled in csi-test): %s", s.FullText())
		case s.State == types.SpecStateSkipped:
			skipped++
			t.Logf("skipped: %s: %s", s.FullText(), s.Failure.Message)
		case s.State.Is(types.SpecStateFailureStates):
			failed++
			t.Errorf("csi-sanity spec failed: %s: %s", s.FullText(), s.Failure.Message)
		}
	}
	if report.PreRunStats.TotalSpecs == 0 {
		t.Fatal("csi-sanity reported no specs: the suite did not run")
	}
	t.Logf("csi-sanity counts: total=%d passed=%d failed=%d skipped=%d pending=%d seconds=%d",
		report.PreRunStats.TotalSpecs, passed, failed, skipped, pending, int(took.Round(time.Second).Seconds()))
}
