package fsm_test

import (
	"flag"
	"fmt"
	"math/rand"
	"regexp"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"berth.dev/berth/fsm"
)

var pluginDiffSeeds = flag.Int("plugin-diff-seeds", 8, "seeds TestPluginInstancesDifferential runs (each both ways)")

var (
	// diffNoise is what only the split form writes: its tables in
	// snapshots and dumps, and the record positions they move.
	diffNoise = regexp.MustCompile(`\s*(index:)?csi_plugin_(instances|allocs)[:=]\S+|\s*end:\d+|record \d+|after \d+ records|(?m)^snapshot .*$|latest=\d+`)
	// diffModify and diffIndex: with the servers' versions changing, the
	// plugin rows' and their mirrors' indexes may differ (a row an older
	// server's form holds is rewritten at a change that only touches it
	// in the other).
	diffModify = regexp.MustCompile(`(plugin \S+: .*) create=\d+ modify=\d+`)
	diffIndex  = regexp.MustCompile(`csi_plugins=\d+|volumes=\d+`)
)

// pluginDiffScript writes a random script of about 70 steps over 4 nodes
// and 2 plugins: NodeCSIUpdate (either rule, health, provider, alloc_id,
// required, unfingerprinted controllers), node down/ready, register and
// deregister, plugin-job placements with claims on two volumes, client
// updates, job stop and re-register, GC, snapshot and restore, and
// batches that change a server's version between a plugin update and a
// plan (flips: the servers table's version changes, which turns the
// split and the join on and off).
func pluginDiffScript(r *rand.Rand, flips bool) string {
	var b strings.Builder
	nodes := []string{"n1", "n2", "n3", "n4"}
	plugins := []string{"p", "q"}
	for _, n := range nodes {
		fmt.Fprintf(&b, "register-node id=%s cpu=10000 mem=10000\n----\n\n", n)
	}
	fmt.Fprintf(&b, "upsert-server id=s1 version=0.1.0-dev.4\n----\n\n")
	fmt.Fprintf(&b, "register-job id=j1 eval=e1 csi=(p:node,p:controller)\n----\n\n")
	fmt.Fprintf(&b, "register-job id=j2 eval=e2 csi=(q:node)\n----\n\n")
	fmt.Fprintf(&b, "register-volume id=v1 plugin=p\n----\n\nregister-volume id=v2 plugin=q caps=(multi-node-multi-writer:file-system)\n----\n\n")
	alloc := 0
	var live []string
	at := 10
	for step := 0; step < 60; step++ {
		at++
		switch k := r.Intn(12); {
		case k < 4:
			n := nodes[r.Intn(len(nodes))]
			rule := "serving"
			if r.Intn(4) == 0 {
				rule = "legacy"
			}
			fmt.Fprintf(&b, "csi-update node=%s at=%d rule=%s\n", n, at, rule)
			for _, p := range plugins {
				for _, side := range []string{"controller", "node"} {
					if r.Intn(2) == 0 {
						continue
					}
					a := ""
					if len(live) > 0 && r.Intn(2) == 0 {
						a = " alloc=" + live[r.Intn(len(live))]
					}
					prov := ""
					if r.Intn(4) != 0 {
						prov = fmt.Sprintf(" provider=prov-%s-%d version=v%d", n, r.Intn(2), r.Intn(3))
					}
					fp := ""
					if side == "controller" && r.Intn(3) == 0 {
						fp = " fingerprinted=false"
					}
					fmt.Fprintf(&b, "  %s plugin=%s healthy=%t required=%t%s%s%s\n", side, p, r.Intn(3) != 0, r.Intn(2) == 0, a, prov, fp)
				}
			}
			b.WriteString("----\n\n")
		case k == 4:
			st := []string{"down", "ready"}[r.Intn(2)]
			fmt.Fprintf(&b, "update-status id=%s status=%s at=%d\n----\n\n", nodes[r.Intn(len(nodes))], st, at)
		case k == 5:
			n := nodes[r.Intn(len(nodes))]
			if r.Intn(3) == 0 {
				fmt.Fprintf(&b, "deregister-node id=%s\n----\n\n", n)
			} else {
				fmt.Fprintf(&b, "register-node id=%s cpu=10000 mem=10000\n----\n\n", n)
			}
		case k == 6 || k == 7:
			alloc++
			j := []string{"j1", "j2"}[r.Intn(2)]
			e := map[string]string{"j1": "e1", "j2": "e2"}[j]
			id := fmt.Sprintf("a%d", alloc)
			live = append(live, id)
			nd := nodes[r.Intn(len(nodes))]
			cl := ""
			if r.Intn(2) == 0 {
				v := []string{"v1", "v2"}[r.Intn(2)]
				acc := "single-node-writer"
				if v == "v2" {
					acc = "multi-node-multi-writer"
				}
				cl = fmt.Sprintf("  claim id=c%s volume=%s alloc=%s node=%s access=%s\n", id, v, id, nd, acc)
			}
			pre := ""
			if r.Intn(3) == 0 {
				pre = "batch\n"
				v := []string{"0.1.0-dev.3", "0.1.0-dev.4"}[r.Intn(2)]
				if flips {
					pre += fmt.Sprintf("upsert-server id=s%d version=%s\n", 1+r.Intn(2), v)
				}
				pre += fmt.Sprintf("csi-update node=%s at=%d\n  controller plugin=p healthy=true required=%t provider=x\n  node plugin=p healthy=%t alloc=%s provider=y\n", nd, at, r.Intn(2) == 0, r.Intn(2) == 0, id)
			}
			fmt.Fprintf(&b, "%splan eval=%s job=%s\n  place id=%s node=%s\n%s----\n\n", pre, e, j, id, nd, cl)
		case k == 8:
			if len(live) == 0 {
				continue
			}
			a := live[r.Intn(len(live))]
			st := []string{"running", "complete", "failed"}[r.Intn(3)]
			// client updates need the alloc's node; use a wrong one sometimes (refused; fine)
			for _, n := range nodes {
				fmt.Fprintf(&b, "client-update node=%s\n  alloc id=%s status=%s at=%d\n----\n\n", n, a, st, at)
			}
		case k == 9:
			if flips {
				v := []string{"0.1.0-dev.3", "0.1.0-dev.4", "0.1.0-dev.5"}[r.Intn(3)]
				fmt.Fprintf(&b, "upsert-server id=s%d version=%s\n----\n\n", 1+r.Intn(2), v)
			} else if r.Intn(2) == 0 {
				fmt.Fprintf(&b, "delete-server id=s2\n----\n\n")
			}
		case k == 10:
			name := fmt.Sprintf("x%d", step)
			fmt.Fprintf(&b, "snapshot name=%s\n----\n\nrestore name=%s\n----\n\n", name, name)
		case k == 11:
			j := []string{"j1", "j2"}[r.Intn(2)]
			switch r.Intn(3) {
			case 0:
				fmt.Fprintf(&b, "deregister-job id=%s eval=ed%d\n----\n\n", j, step)
			case 1:
				fmt.Fprintf(&b, "register-job id=%s eval=er%d csi=(p:node)\n----\n\n", j, step)
			default:
				fmt.Fprintf(&b, "gc allocs=(%s) at=%d\n----\n\n", strings.Join(live, ","), at)
			}
		}
	}
	return b.String()
}

// pluginDiffRun runs script with the gate forced (force) or read from the
// servers table (nil), checking the plugin rows' invariant after each
// step, and returns each step's output.
func pluginDiffRun(t *testing.T, script string, force *bool) []string {
	t.Helper()
	if force != nil {
		defer fsm.ForceInstancesSplit(*force)()
	}
	var outs []string
	h := newScriptHarness(t)
	datadriven.RunTestFromString(t, script, func(t *testing.T, td *datadriven.TestData) string {
		out := h.run(t, td)
		if err := h.fsm.State().CheckPluginRows(); err != nil {
			t.Errorf("%s: plugin rows: %v", td.Pos, err)
		}
		outs = append(outs, td.Pos+" "+td.Input+"\n"+out)
		return td.Expected
	})
	return outs
}

// TestPluginInstancesDifferential runs random scripts (pluginDiffScript)
// with the plugin instances kept inline and split (forced), and inline
// against the servers table's own gate with versions changing, and
// requires every step's full output to be the same (up to diffNoise):
// counts, provider, controller_required, instances, allocations and their
// health, the volumes' mirrors, skipped publishes, claims and
// attachments. Not parallel: the gate is forced for the package.
// -plugin-diff-seeds=N runs more.
func TestPluginInstancesDifferential(t *testing.T) {
	seeds := *pluginDiffSeeds
	if testing.Short() {
		seeds = min(seeds, 3)
	}
	off, on := false, true
	for seed := int64(1000); seed < 1000+int64(seeds); seed++ {
		for _, flips := range []bool{false, true} {
			script := pluginDiffScript(rand.New(rand.NewSource(seed)), flips)
			inline := pluginDiffRun(t, script, &off)
			force := &on
			if flips {
				force = nil
			}
			other := pluginDiffRun(t, script, force)
			for i := range inline {
				a, b := diffNoise.ReplaceAllString(inline[i], ""), diffNoise.ReplaceAllString(other[i], "")
				if flips {
					a = diffIndex.ReplaceAllString(diffModify.ReplaceAllString(a, "$1"), "")
					b = diffIndex.ReplaceAllString(diffModify.ReplaceAllString(b, "$1"), "")
				}
				if a != b {
					t.Fatalf("seed %d flips=%t step %d differs:\n--- inline\n%s\n--- other\n%s\nscript:\n%s", seed, flips, i, inline[i], other[i], script)
				}
			}
		}
	}
}
