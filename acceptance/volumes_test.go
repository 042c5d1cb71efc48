package acceptance

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The volumes acceptance test: three servers and two clients as real
// processes, the built-in hostpath plugin as a controller service job and
// a node system job, and a volume created through it:
//
//   - `volume create` reaches the controller through the servers and the
//     node's tunnel; the volume is schedulable;
//   - a job claiming it single-node-writer is placed with its claim
//     reserved in the same plan; the leader's attach reconciler sends
//     ControllerPublishVolume to the controller's client and writes back
//     the attachment (attached, with the controller and CSI node IDs) and
//     the claim (ready); the client stages and publishes it (in-use) and
//     the task writes through $BERTH_VOLUME_DATA;
//   - a second writer is not placed: its evaluation blocks; an operator's
//     write claim is refused naming the volume;
//   - the leader is killed: the new leader serves the same claim and
//     attachment, with nothing published twice;
//   - the job is stopped: its client unpublishes, the leader unpublishes
//     through the controller and frees the claim, and the blocked second
//     writer is placed and reads what the first wrote; never two claims.

type apiClaim struct {
	ID       string `json:"id"`
	VolumeID string `json:"volume_id"`
	AllocID  string `json:"alloc_id"`
	NodeID   string `json:"node_id"`
	Mode     string `json:"mode"`
	State    string `json:"state"`
}

type apiAttachment struct {
	VolumeID         string `json:"volume_id"`
	NodeID           string `json:"node_id"`
	State            string `json:"state"`
	ControllerNodeID string `json:"controller_node_id"`
	CSINodeID        string `json:"csi_node_id"`
	Attempts         int    `json:"attempts"`
	ModifyIndex      uint64 `json:"modify_index"`
}

type apiVolumeView struct {
	Volume struct {
		ID          string            `json:"id"`
		PluginID    string            `json:"plugin_id"`
		ExternalID  string            `json:"external_id"`
		Schedulable bool              `json:"schedulable"`
		Secrets     map[string]string `json:"secrets"`
		// CapacityBytes is the recorded capacity; NodeExpansionPendingBytes
		// a node expansion not yet made everywhere.
		CapacityBytes             int64 `json:"capacity_bytes"`
		NodeExpansionPendingBytes int64 `json:"node_expansion_pending_bytes"`
	} `json:"volume"`
	Claims      []apiClaim      `json:"claims"`
	Attachments []apiAttachment `json:"attachments"`
}

func (a *agent) volume(id string) (apiVolumeView, error) {
	var v apiVolumeView
	return v, a.getJSON("/v1/volume/csi/"+id, &v)
}

type apiEval struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

// consumerJob is a service job of one alloc that claims volume vol with
// the given access mode, runs script (sh) in the task and sleeps.
func consumerJob(id, vol, accessMode, script string) string {
	return fmt.Sprintf(`
job %q {
  type = "service"
  group "app" {
    count = 1
    volume "data" {
      type            = "csi"
      source          = %q
      access_mode     = %q
      attachment_mode = "file-system"
    }
    task "app" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo $$ > local/pid; %s; exec sleep 600"]
      }
      volume_mount {
        volume      = "data"
        destination = "/data"
      }
      resources {
        cpu    = 20
        memory = 32
      }
      kill_timeout = "2s"
    }
  }
}
`, id, vol, accessMode, script)
}

func TestVolumeClaims(t *testing.T) {
	c := startCSICluster(t)
	s := c.servers[0]
	state := t.TempDir()
	t.Cleanup(func() {
		stopAllJobs(t, s, "app2", "app", "hpv-node", "hpv-ctrl")
	})

	// The plugin: a controller on one client, a node instance on each,
	// sharing one state directory (one machine).
	runJob(t, s, "hpv-ctrl", csiJob("hpv-ctrl", "service", 1, hostpathTask("hpv", "controller", "controller", state+"/hpv")))
	runJob(t, s, "hpv-node", csiJob("hpv-node", "system", 0, hostpathTask("hpv", "node", "node", state+"/hpv")))
	eventually(t, 60*time.Second, "plugin hpv schedulable with 1/1 controllers and 2/2 nodes", func() error {
		p, err := s.plugin("hpv")
		if err != nil {
			return err
		}
		if err := wantCounts(p, 1, 1, 2, 2); err != nil {
			return err
		}
		if !p.Schedulable || !p.ControllerRequired {
			return fmt.Errorf("plugin hpv: schedulable %v, controller required %v", p.Schedulable, p.ControllerRequired)
		}
		return nil
	})

	// Create: CreateVolume through the controller's client.
	volFile := filepath.Join(t.TempDir(), "vol.hcl")
	if err := os.WriteFile(volFile, []byte(`
id           = "vol1"
plugin_id    = "hpv"
capacity_min = "1MiB"
capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
secrets {
  token = "s3cr3t-never-shown"
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := s.cli("volume", "create", volFile); err != nil {
		t.Fatalf("volume create: %v\n%s", err, out)
	}
	// Reads are served by the server asked, which may apply the write a
	// moment after the leader answered it.
	eventually(t, 10*time.Second, "vol1 registered and schedulable", func() error {
		v, err := s.volume("vol1")
		if err != nil {
			return err
		}
		if v.Volume.ExternalID == "" || !v.Volume.Schedulable {
			return fmt.Errorf("created volume: external ID %q, schedulable %v", v.Volume.ExternalID, v.Volume.Schedulable)
		}
		return nil
	})

	// A writer: placed with its claim; the leader publishes through the
	// controller and the claim becomes ready.
	runJob(t, s, "app", consumerJob("app", "vol1", "single-node-writer", "echo written-by-app > $BERTH_VOLUME_DATA/hello"))
	var alloc apiAlloc
	eventually(t, 30*time.Second, "app placed", func() error {
		allocs, err := s.jobAllocs("app")
		if err != nil {
			return err
		}
		if len(allocs) != 1 {
			return fmt.Errorf("%d allocs", len(allocs))
		}
		alloc = allocs[0]
		return nil
	})
	var att apiAttachment
	eventually(t, 30*time.Second, "vol1 attached and its claim ready", func() error {
		v, err := s.volume("vol1")
		if err != nil {
			return err
		}
		if len(v.Claims) != 1 || len(v.Attachments) != 1 {
			return fmt.Errorf("%d claims, %d attachments", len(v.Claims), len(v.Attachments))
		}
		cl, a := v.Claims[0], v.Attachments[0]
		if cl.AllocID != alloc.ID || cl.NodeID != alloc.NodeID || cl.Mode != "write" {
			return fmt.Errorf("claim %+v, want alloc %s on node %s writing", cl, alloc.ID, alloc.NodeID)
		}
		if a.State != "attached" || cl.State != "in-use" {
			return fmt.Errorf("attachment %s, claim %s", a.State, cl.State)
		}
		if a.NodeID != alloc.NodeID || a.ControllerNodeID == "" || a.CSINodeID == "" {
			return fmt.Errorf("attachment %+v", a)
		}
		att = a
		return nil
	})

	// A second writer waits: its evaluation blocks on the claim.
	runJob(t, s, "app2", consumerJob("app2", "vol1", "single-node-writer", "cat $BERTH_VOLUME_DATA/hello"))
	eventually(t, 30*time.Second, "app2's evaluation blocked", func() error {
		var evals []apiEval
		if err := s.getJSON("/v1/job/app2/evaluations", &evals); err != nil {
			return err
		}
		for _, e := range evals {
			if e.Status == "blocked" {
				return nil
			}
		}
		return fmt.Errorf("evaluations %+v", evals)
	})
	if allocs, err := s.jobAllocs("app2"); err != nil || len(allocs) != 0 {
		t.Fatalf("app2 placed beside the writer: %+v (%v)", allocs, err)
	}
	out, err := s.cli("volume", "claim", "-mode", "write", "vol1")
	if err == nil || !strings.Contains(out, "vol1") {
		t.Fatalf("an operator's second write claim: err %v, output:\n%s", err, out)
	}

	// No API answer shows the secret.
	for _, path := range []string{"/v1/volume/csi/vol1", "/v1/volumes"} {
		var raw map[string]any
		var list []any
		var err error
		if path == "/v1/volumes" {
			err = s.getJSON(path, &list)
		} else {
			err = s.getJSON(path, &raw)
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(fmt.Sprint(raw, list), "s3cr3t") {
			t.Fatalf("GET %s shows the volume's secret", path)
		}
	}

	// Kill -9 the leader: the survivors' new leader serves the same claim
	// and attachment and publishes nothing again.
	var leaderAddr string
	eventually(t, 30*time.Second, "servers agree on a leader", func() (err error) {
		leaderAddr, err = agreedLeader(c.servers)
		return err
	})
	var old *agent
	for _, srv := range c.servers {
		if srv.rpcAddr == leaderAddr {
			old = srv
		}
	}
	if old == nil {
		t.Fatalf("leader %s is not one of our servers", leaderAddr)
	}
	survivors := without(c.servers, old)
	old.kill()
	eventually(t, 30*time.Second, "survivors elect a new leader", func() error {
		l, err := agreedLeader(survivors)
		if err != nil {
			return err
		}
		if l == old.rpcAddr {
			return fmt.Errorf("survivors still follow the killed leader")
		}
		return nil
	})
	s = survivors[0]
	v, err := s.volume("vol1")
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Attachments) != 1 || v.Attachments[0].State != "attached" || v.Attachments[0].ModifyIndex != att.ModifyIndex {
		t.Fatalf("after the leader's death the attachment is %+v, was %+v", v.Attachments, att)
	}
	if len(v.Claims) != 1 || v.Claims[0].State != "in-use" {
		t.Fatalf("after the leader's death the claims are %+v", v.Claims)
	}

	// Stop the writer: its client unpublishes and unstages, the leader
	// unpublishes through the controller and frees the claim, and the
	// blocked second writer is placed, published, and reads the file the
	// first one wrote. Never two claims of the volume at once.
	stopJob(t, s, "app")
	var alloc2 apiAlloc
	eventually(t, 60*time.Second, "app's claim freed and app2 using vol1", func() error {
		v, err := s.volume("vol1")
		if err != nil {
			return err
		}
		if len(v.Claims) > 1 {
			t.Fatalf("two claims of single-node-writer vol1 at once: %+v", v.Claims)
		}
		if len(v.Claims) != 1 || v.Claims[0].AllocID == alloc.ID || v.Claims[0].State != "in-use" {
			return fmt.Errorf("claims %+v", v.Claims)
		}
		allocs, err := s.jobAllocs("app2")
		if err != nil || len(allocs) != 1 || allocs[0].ID != v.Claims[0].AllocID || allocs[0].ClientStatus != "running" {
			return fmt.Errorf("app2 allocs %+v (%v), claim %+v", allocs, err, v.Claims[0])
		}
		alloc2 = allocs[0]
		return nil
	})
	eventually(t, 30*time.Second, "app2 read what app wrote", func() error {
		out, err := s.cli("alloc", "logs", alloc2.ID, "app")
		if err != nil || !strings.Contains(out, "written-by-app") {
			return fmt.Errorf("app2's output %q (%v)", out, err)
		}
		return nil
	})
}
