//go:build linux

package hostpath_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"

	"berth.dev/berth/builtin/csi/hostpath"
)

// minSanityPassed is the number of csi-sanity specs (of 103 in v5.6.0) the
// plugin must pass; SANITY.md lists the ones it skips and why.
const minSanityPassed = 80

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
	srv, err := hostpath.Start(ctx, hostpath.Config{
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
	cfg.TestVolumeMutableParameters = map[string]string{hostpath.ParamMode: "0770"}
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

// testLogger routes plugin logs to t.Log, shown when the test fails or -v.
func testLogger(t testing.TB, level hclog.Level) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: level, Output: testWriter{t}})
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}
