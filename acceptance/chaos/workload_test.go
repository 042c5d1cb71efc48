package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The plugin every volume of the run lives in: the built-in hostpath
// plugin, a controller service job and a node system job sharing one state
// directory (one machine), so a volume written on one client is read on
// another.
const plugin = "hp"

// writerScript is what a consumer that writes runs: it appends
// "<alloc> <seq> <unix ns>" to the volume's log under an exclusive flock,
// every 100ms, for as long as it lives. Two writers alive at once
// interleave their records in the log, whatever the servers say.
const writerScript = `#!/bin/sh
log="$BERTH_VOLUME_DATA/log"
i=0
while :; do
  i=$((i+1))
  flock "$BERTH_VOLUME_DATA/log.lock" sh -c 'echo "$0 $1 $(date +%s%N)" >> "$2"' "$BERTH_ALLOC_ID" "$i" "$log" || exit 1
  sleep 0.1
done
`

// readerScript reads the volume's log now and then.
const readerScript = `#!/bin/sh
while :; do
  cat "$BERTH_VOLUME_DATA/log" > /dev/null 2>&1
  sleep 1
done
`

// volumeSpec is one volume of the run.
type volumeSpec struct {
	id    string
	modes []string // capabilities' access modes
}

// The run's volumes: writers' single-node-writer volumes, a
// multi-node-reader-only one with readers on any clients, and two only
// operators claim (the linearizability check's). No job writes a
// multi-node-single-writer volume beside readers: a writer's claim stays
// node-detached while readers live on its node (fsm freeBesideLive keeps
// it until the attachment is unpublished), so its replacement waits for
// every reader there to go, which a stream of readers never lets happen.
var (
	jobVolumes = []volumeSpec{
		{"w1", []string{"single-node-writer"}},
		{"w2", []string{"single-node-writer"}},
		{"r1", []string{"multi-node-reader-only"}},
	}
	claimVolumes = []volumeSpec{
		{"o1", []string{"single-node-writer"}},
		{"o2", []string{"multi-node-single-writer"}},
	}
)

// consumer is one job of the workload and what the test wants of it.
type consumer struct {
	id     string
	volume string
	access string
	writer bool
	// wanted state: running (with gen and pin) or stopped.
	running bool
	gen     int
	pin     string // client name; "" places anywhere
}

var consumers = []*consumer{
	{id: "wj1", volume: "w1", access: "single-node-writer", writer: true},
	{id: "wj2", volume: "w2", access: "single-node-writer", writer: true},
	{id: "rr1a", volume: "r1", access: "multi-node-reader-only"},
	{id: "rr1b", volume: "r1", access: "multi-node-reader-only"},
}

// workload drives the run's jobs and operator claims.
type workload struct {
	t         *testing.T
	c         *cluster
	dir       string
	stateDir  string
	nodeIDs   map[string]string // client name → node ID
	consumers []*consumer
	ops       *history

	mu      sync.Mutex
	actions []string
	count   map[string]int
}

func newWorkload(t *testing.T, c *cluster, dir string, nodeIDs map[string]string) *workload {
	w := &workload{t: t, c: c, dir: dir, stateDir: filepath.Join(dir, "hp-state"), nodeIDs: nodeIDs, ops: newHistory(), count: map[string]int{}}
	for _, k := range consumers {
		cp := *k
		w.consumers = append(w.consumers, &cp)
	}
	for name, body := range map[string]string{"writer.sh": writerScript, "reader.sh": readerScript} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// setup runs the plugin, creates the volumes and starts every consumer.
func (w *workload) setup() {
	t := w.t
	w.runJob("hp-ctrl", pluginJob("hp-ctrl", "service", hostpathTask("controller", w.stateDir)))
	w.runJob("hp-node", pluginJob("hp-node", "system", hostpathTask("node", w.stateDir)))
	err := waitFor(90*time.Second, func() error {
		var p struct {
			ControllersHealthy int  `json:"controllers_healthy"`
			NodesHealthy       int  `json:"nodes_healthy"`
			Schedulable        bool `json:"schedulable"`
		}
		if err := w.c.get(w.c.api(), "/v1/plugin/csi/"+plugin, &p); err != nil {
			return err
		}
		if p.ControllersHealthy != 1 || p.NodesHealthy != len(w.c.clients) || !p.Schedulable {
			return fmt.Errorf("plugin %s: %+v", plugin, p)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("plugin up: %v", err)
	}
	for _, v := range append(append([]volumeSpec(nil), jobVolumes...), claimVolumes...) {
		w.createVolume(v)
	}
	for _, k := range w.consumers {
		k.running = true
		w.runConsumer(k)
	}
}

func (w *workload) createVolume(v volumeSpec) {
	t := w.t
	body := fmt.Sprintf("id = %q\nplugin_id = %q\ncapacity_min = \"1MiB\"\n", v.id, plugin)
	for _, m := range v.modes {
		body += fmt.Sprintf("capability {\n  access_mode = %q\n  attachment_mode = \"file-system\"\n}\n", m)
	}
	file := filepath.Join(w.dir, "volume-"+v.id+".hcl")
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := w.c.cli(w.c.api(), "volume", "create", file); err != nil {
		t.Fatalf("volume create %s: %v\n%s", v.id, err, out)
	}
	err := waitFor(30*time.Second, func() error {
		var view struct {
			Volume struct {
				ExternalID  string `json:"external_id"`
				Schedulable bool   `json:"schedulable"`
			} `json:"volume"`
		}
		if err := w.c.get(w.c.api(), "/v1/volume/csi/"+v.id, &view); err != nil {
			return err
		}
		if view.Volume.ExternalID == "" || !view.Volume.Schedulable {
			return fmt.Errorf("volume %s: %+v", v.id, view.Volume)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("volume %s: %v", v.id, err)
	}
}

// runJob registers spec; a failure ends the test (setup only).
func (w *workload) runJob(id, spec string) {
	w.t.Helper()
	if err := w.register(id, spec); err != nil {
		w.t.Fatal(err)
	}
}

// register writes spec to a file and runs `berth job run -detach` against
// a running server, trying each once.
func (w *workload) register(id, spec string) error {
	file := filepath.Join(w.dir, "job-"+id+".hcl")
	if err := os.WriteFile(file, []byte(spec), 0o644); err != nil {
		return err
	}
	var errs []error
	for _, s := range w.c.servers {
		if !s.running() || s.isStopped() {
			continue
		}
		out, err := w.c.cli(s, "job", "run", "-detach", file)
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("job run %s on %s: %v: %s", id, s.name, err, strings.TrimSpace(out)))
	}
	return errors.Join(errs...)
}

func (w *workload) deregister(id string) error {
	var errs []error
	for _, s := range w.c.servers {
		if !s.running() || s.isStopped() {
			continue
		}
		out, err := w.c.cli(s, "job", "stop", id)
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("job stop %s on %s: %v: %s", id, s.name, err, strings.TrimSpace(out)))
	}
	return errors.Join(errs...)
}

func (w *workload) runConsumer(k *consumer) error {
	script := "reader.sh"
	if k.writer {
		script = "writer.sh"
	}
	return w.register(k.id, consumerJob(k, filepath.Join(w.dir, script)))
}

// note counts an action of the workload.
func (w *workload) note(kind, format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.count[kind]++
	w.actions = append(w.actions, fmt.Sprintf("%s %s", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...)))
}

// drive changes consumers until ctx ends: an update (a new version, so its
// alloc is replaced), a move to another client, a stop, a start again. The
// wanted state is recorded before the request: a request that failed under
// a fault is retried by the next action or by settle.
func (w *workload) drive(ctx context.Context, rng *rand.Rand) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(500+rng.IntN(1500)) * time.Millisecond):
		}
		k := w.consumers[rng.IntN(len(w.consumers))]
		var err error
		switch x := rng.IntN(10); {
		case !k.running:
			k.running = true
			w.note("start", "start %s", k.id)
			err = w.runConsumer(k)
		case x < 4:
			k.gen++
			w.note("update", "update %s to gen %d", k.id, k.gen)
			err = w.runConsumer(k)
		case x < 7:
			k.gen++
			k.pin = w.c.clients[rng.IntN(len(w.c.clients))].name
			w.note("move", "move %s to %s", k.id, k.pin)
			err = w.runConsumer(k)
		default:
			k.running = false
			w.note("stop", "stop %s", k.id)
			err = w.deregister(k.id)
		}
		if err != nil {
			w.note("request-failed", "%v", err)
		}
	}
}

// settle makes every consumer's last wanted state asked of the servers
// again (a request lost to a fault is not lost for good).
func (w *workload) settle() error {
	var errs []error
	for _, k := range w.consumers {
		if k.running {
			errs = append(errs, w.runConsumer(k))
		} else {
			errs = append(errs, w.deregister(k.id))
		}
	}
	return errors.Join(errs...)
}

func hostpathTask(mode, stateDir string) string {
	return fmt.Sprintf(`
    task "plugin" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo $$ > local/pid; exec %s builtin csi-hostpath --endpoint ${CSI_ENDPOINT} --node-id ${node.unique.name} --mode %s --state-dir %s"]
      }
      csi_plugin {
        id             = %q
        type           = %q
        health_timeout = "20s"
      }
      resources {
        cpu    = 50
        memory = 64
      }
      kill_timeout = "5s"
    }`, berthBin, mode, stateDir, plugin, mode)
}

func pluginJob(id, typ, task string) string {
	reschedule := ""
	if typ == "service" {
		reschedule = rescheduleBlock
	}
	return fmt.Sprintf(`
job %q {
  type = %q
  group "plugin" {
    restart {
      attempts = 10
      interval = "1m"
      delay    = "1s"
      mode     = "fail"
    }
%s
%s
  }
}
`, id, typ, reschedule, task)
}

// rescheduleBlock is the service groups' reschedule policy. As the restart
// block shortens Nomad's 15s restart delay to 1s, this shortens the
// default reschedule delay (30s, doubling to 1h): an alloc that fails in
// the last fault (a full disk: the client cannot record it, so it fails
// before any task starts) would otherwise be replaced 30s after it failed,
// up to 30s past the heal, and a chain's second failure 60s after. The
// check's 30s then measures berth bringing the cluster back, not a policy
// wait: 8s at most, then a placement. The convergence timeline names a
// job that waits on its reschedule (its failed alloc, the follow-up
// evaluation's wait_until).
const rescheduleBlock = `    reschedule {
      delay     = "2s"
      max_delay = "8s"
      unlimited = true
    }`

func consumerJob(k *consumer, script string) string {
	pin := ""
	if k.pin != "" {
		pin = fmt.Sprintf(`constraint {
    attribute = "${node.unique.name}"
    value     = %q
  }`, k.pin)
	}
	return fmt.Sprintf(`
job %q {
  type = "service"
  %s
  group "app" {
    restart {
      attempts = 10
      interval = "1m"
      delay    = "1s"
      mode     = "fail"
    }
%s
    volume "data" {
      type            = "csi"
      source          = %q
      access_mode     = %q
      attachment_mode = "file-system"
      read_only       = %t
    }
    task "app" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = [%q, "gen-%d"]
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
`, k.id, pin, rescheduleBlock, k.volume, k.access, !k.writer, script, k.gen)
}
