package main

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

func TestScratchProfile(t *testing.T) {
	p, _ := newPayloads()
	c, err := startCluster(t.Context(), filepath.Join(t.TempDir(), "c"), 1, berthKind, hclog.NewNullLogger())
	if err != nil { t.Fatal(err) }
	defer c.shutdown()
	res, err := runLoad(t.Context(), c.leader, berthKind, p, 64, 4*time.Second)
	if err != nil { t.Fatal(err) }
	cpu, _ := res.cpuPerOp()
	t.Logf("ops=%d ops/s=%.0f cpu/op=%v", res.ops, res.opsPerSec(), cpu)
}
