package acceptance

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// apiExpand is the part of `volume expand -json` the test reads.
type apiExpand struct {
	CapacityBytes         int64 `json:"capacity_bytes"`
	NodeExpansionRequired bool  `json:"node_expansion_required"`
	Nodes                 []struct {
		NodeID        string `json:"node_id"`
		CapacityBytes int64  `json:"capacity_bytes"`
		Error         string `json:"error"`
	} `json:"nodes"`
	RecordedCapacityBytes     int64 `json:"recorded_capacity_bytes"`
	NodeExpansionPendingBytes int64 `json:"node_expansion_pending_bytes"`
}

// `volume expand` on a dev agent with the built-in hostpath plugin, whose
// mount volumes need a node expansion: with the volume claimed (published
// on the node) the command waits for the node's NodeExpandVolume and shows
// its row, and the capacity is recorded; with the volume claimed nowhere
// the node expansion is left pending. The time from `volume expand` to its
// answer is logged.
func TestVolumeExpandOnADevAgent(t *testing.T) {
	a := startDevAgent(t)
	waitPluginSchedulable(t, a, "hostpath", 1, 1)
	createVolume(t, a, "grow", "hostpath")
	claimID, _ := operatorClaim(t, a, "grow", "write")

	start := time.Now()
	out, err := a.cli("volume", "expand", "-capacity-min", "8MiB", "grow")
	took := time.Since(start)
	if err != nil {
		t.Fatalf("volume expand: %v\n%s", err, out)
	}
	t.Logf("volume expand with the volume published on the node: %s (CLI process included)", took)
	for _, want := range []string{`Volume "grow" expanded to 8.0 MiB by its plugin`, "Node expansion (NodeExpandVolume):", "8.0 MiB   expanded", "Recorded capacity: 8.0 MiB"} {
		if !strings.Contains(out, want) {
			t.Fatalf("volume expand printed no %q:\n%s", want, out)
		}
	}

	out, err = a.cli("volume", "expand", "-json", "-capacity-min", "12MiB", "grow")
	if err != nil {
		t.Fatalf("volume expand -json: %v\n%s", err, out)
	}
	var resp apiExpand
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatalf("volume expand -json printed %s: %v", out, err)
	}
	if !resp.NodeExpansionRequired || len(resp.Nodes) != 1 || resp.Nodes[0].Error != "" || resp.Nodes[0].CapacityBytes != 12<<20 ||
		resp.RecordedCapacityBytes != 12<<20 || resp.NodeExpansionPendingBytes != 0 {
		t.Fatalf("volume expand -json answered %+v", resp)
	}

	if out, err := a.cli("volume", "release", claimID); err != nil {
		t.Fatalf("volume release %s: %v\n%s", claimID, err, out)
	}
	waitVolumeFreed(t, a, "grow", time.Now(), freeBound)
	out, err = a.cli("volume", "expand", "-json", "-capacity-min", "16MiB", "grow")
	if err != nil {
		t.Fatalf("volume expand of a volume claimed nowhere: %v\n%s", err, out)
	}
	resp = apiExpand{}
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatalf("volume expand -json printed %s: %v", out, err)
	}
	if len(resp.Nodes) != 0 || resp.RecordedCapacityBytes != 12<<20 || resp.NodeExpansionPendingBytes != 16<<20 {
		t.Fatalf("volume expand of a volume claimed nowhere answered %+v", resp)
	}
	// The next claim stages it and makes the pending expansion (the
	// client logs it).
	claimID, _ = operatorClaim(t, a, "grow", "write")
	eventually(t, 10*time.Second, "the pending node expansion made at the stage", func() error {
		b, err := os.ReadFile(a.logPath)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "volume expanded on the node") && strings.Contains(line, "volume_id=grow") && strings.Contains(line, "bytes=16777216") {
				return nil
			}
		}
		return errors.New("no node expansion to 16MiB in the agent's log")
	})
	// Every server runs this version, so the claim's in-use report carries
	// the expansion and its apply records the capacity and clears the
	// pending size.
	eventually(t, 10*time.Second, "the expansion made at the stage recorded", func() error {
		v, err := a.volume("grow")
		if err != nil {
			return err
		}
		if v.Volume.CapacityBytes != 16<<20 || v.Volume.NodeExpansionPendingBytes != 0 {
			return fmt.Errorf("capacity %d, pending %d; want %d, 0", v.Volume.CapacityBytes, v.Volume.NodeExpansionPendingBytes, 16<<20)
		}
		return nil
	})
	if out, err := a.cli("volume", "release", claimID); err != nil {
		t.Fatalf("volume release %s: %v\n%s", claimID, err, out)
	}
	waitVolumeFreed(t, a, "grow", time.Now(), freeBound)
}
