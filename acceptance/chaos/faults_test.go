package chaos

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The fault kinds of a schedule.
const (
	faultPartitionLeader   = "partition-leader"   // the leader cut off from every other agent
	faultPartitionFollower = "partition-follower" // a follower cut off
	faultPartitionClient   = "partition-client"   // a client cut off
	faultOneWay            = "one-way"            // an agent's packets out dropped, those in kept
	faultNetem             = "netem"              // delay and loss on an agent's link
	faultKillServer        = "kill-server"        // kill -9, restarted at the heal
	faultKillClient        = "kill-client"        // kill -9, restarted at the heal
	faultKillPlugin        = "kill-plugin"        // a plugin task kill -9 (its restart policy brings it back)
	faultStopPlugin        = "stop-plugin"        // SIGSTOP, SIGCONT at the heal
	faultStopServer        = "stop-server"        // SIGSTOP, SIGCONT at the heal
	faultFullDisk          = "full-disk"          // a client's data dir filled to the last byte
)

var faultKinds = []string{faultPartitionLeader, faultPartitionFollower, faultPartitionClient, faultOneWay, faultNetem,
	faultKillServer, faultKillClient, faultKillPlugin, faultStopPlugin, faultStopServer, faultFullDisk}

// fault is one entry of the schedule: after a pause, kind hits a target
// (an index into its role's agents, or a choice the kind makes) for hold,
// then heals.
type fault struct {
	kind   string
	pick   int // which agent of the role (leader/follower picks among the matching)
	pause  time.Duration
	hold   time.Duration
	delay  int // netem delay in ms
	loss   int // netem loss in percent
	target string
}

func (f fault) String() string {
	s := fmt.Sprintf("+%s %s pick=%d for %s", f.pause, f.kind, f.pick, f.hold)
	if f.kind == faultNetem {
		s += fmt.Sprintf(" delay=%dms loss=%d%%", f.delay, f.loss)
	}
	if f.target != "" {
		s += " on " + f.target
	}
	return s
}

// schedule draws n faults from rng: every kind once before any twice, in a
// random order.
func schedule(rng *rand.Rand, n int) []fault {
	var out []fault
	for len(out) < n {
		for _, i := range rng.Perm(len(faultKinds)) {
			if len(out) == n {
				break
			}
			out = append(out, fault{
				kind:  faultKinds[i],
				pick:  rng.IntN(6),
				pause: time.Duration(1000+rng.IntN(2000)) * time.Millisecond,
				hold:  time.Duration(2000+rng.IntN(4000)) * time.Millisecond,
				delay: 50 + rng.IntN(250),
				loss:  rng.IntN(20),
			})
		}
	}
	return out
}

// injector plays faults on the cluster.
type injector struct {
	c    *cluster
	w    *workload
	heal func() error
}

// inject starts f and sets heal; it returns the target's name.
func (in *injector) inject(f *fault) error {
	c := in.c
	pickOf := func(as []*agent) *agent { return as[f.pick%len(as)] }
	var target *agent
	switch f.kind {
	case faultPartitionLeader, faultPartitionFollower, faultStopServer, faultKillServer:
		// A heal just before may have left an election running.
		var l *agent
		err := waitFor(15*time.Second, func() (err error) {
			l, err = c.leader()
			return err
		})
		if err != nil {
			return fmt.Errorf("no leader to aim %s at: %w", f.kind, err)
		}
		target = l
		if f.kind == faultPartitionFollower || (f.kind != faultPartitionLeader && f.pick%2 == 1) {
			target = pickOf(without(c.servers, l))
		}
	case faultPartitionClient, faultKillClient:
		target = pickOf(c.clients)
	case faultOneWay, faultNetem:
		target = pickOf(c.all())
	case faultFullDisk:
		target = c.fullDisk
	}
	if target != nil {
		f.target = target.name
	}
	switch f.kind {
	case faultPartitionLeader, faultPartitionFollower, faultPartitionClient, faultOneWay:
		if err := partition(c, target, f.kind != faultOneWay); err != nil {
			return err
		}
		in.heal = func() error { return inNS(target.ns, "nft", "delete", "table", "inet", "chaos") }
	case faultNetem:
		err := inNS(target.ns, "tc", "qdisc", "add", "dev", "eth0", "root", "netem",
			"delay", fmt.Sprintf("%dms", f.delay), fmt.Sprintf("%dms", f.delay/4), "loss", fmt.Sprintf("%d%%", f.loss))
		if err == nil {
			in.heal = func() error { return inNS(target.ns, "tc", "qdisc", "del", "dev", "eth0", "root") }
			break
		}
		if !strings.Contains(err.Error(), "qdisc kind is unknown") {
			return err
		}
		// A kernel without sch_netem: a token bucket slow enough to queue
		// (its latency bounds the delay) and nftables dropping a share of
		// the packets both ways.
		f.target += " (no netem in this kernel: tbf 256kbit + nftables loss)"
		if err := inNS(target.ns, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "256kbit", "burst", "16kbit", "latency", fmt.Sprintf("%dms", f.delay)); err != nil {
			return err
		}
		rules := fmt.Sprintf("table inet chaos {\n chain out {\n  type filter hook output priority 0; policy accept;\n  numgen random mod 100 < %d drop\n }\n chain in {\n  type filter hook input priority 0; policy accept;\n  numgen random mod 100 < %d drop\n }\n}\n", f.loss, f.loss)
		if err := nftLoad(target.ns, rules); err != nil {
			return err
		}
		in.heal = func() error {
			return errors.Join(inNS(target.ns, "tc", "qdisc", "del", "dev", "eth0", "root"), inNS(target.ns, "nft", "delete", "table", "inet", "chaos"))
		}
	case faultKillServer, faultKillClient:
		target.kill()
		in.heal = func() error { target.start(c.t); return nil }
	case faultStopServer:
		target.signal(syscall.SIGSTOP)
		in.heal = func() error { target.signal(syscall.SIGCONT); return nil }
	case faultKillPlugin, faultStopPlugin:
		pids := pluginPIDs(c)
		if len(pids) == 0 {
			return errors.New("no plugin task runs")
		}
		p := pids[f.pick%len(pids)]
		f.target = p.where
		if f.kind == faultKillPlugin {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
			in.heal = func() error { return nil }
		} else {
			_ = syscall.Kill(p.pid, syscall.SIGSTOP)
			in.heal = func() error { _ = syscall.Kill(p.pid, syscall.SIGCONT); return nil }
		}
	case faultFullDisk:
		path := filepath.Join(target.dir, "data", "chaos-filler")
		if err := fillDisk(path); err != nil {
			return err
		}
		in.heal = func() error { return os.Remove(path) }
	}
	return nil
}

func without(all []*agent, x *agent) []*agent {
	var out []*agent
	for _, a := range all {
		if a != x {
			out = append(out, a)
		}
	}
	return out
}

// partition drops target's packets to every other agent and, both ways,
// theirs to it (the hub's own address, the test's, is spared).
func partition(c *cluster, target *agent, bothWays bool) error {
	var peers []string
	for _, a := range c.all() {
		if a != target {
			peers = append(peers, a.ip)
		}
	}
	set := "{ " + strings.Join(peers, ", ") + " }"
	rules := fmt.Sprintf("table inet chaos {\n chain out {\n  type filter hook output priority 0; policy accept;\n  ip daddr %s drop\n }\n", set)
	if bothWays {
		rules += fmt.Sprintf(" chain in {\n  type filter hook input priority 0; policy accept;\n  ip saddr %s drop\n }\n", set)
	}
	rules += "}\n"
	return nftLoad(target.ns, rules)
}

// nftLoad loads an nftables ruleset in namespace ns.
func nftLoad(ns, rules string) error {
	f, err := os.CreateTemp("", "chaos-nft-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(rules); err != nil {
		return err
	}
	f.Close()
	return inNS(ns, "nft", "-f", f.Name())
}

type pluginPID struct {
	pid   int
	where string
}

// pluginPIDs are the plugin tasks alive on the clients (each writes its
// PID to local/pid).
func pluginPIDs(c *cluster) []pluginPID {
	var out []pluginPID
	for _, cl := range c.clients {
		files, _ := filepath.Glob(filepath.Join(cl.dir, "data", "alloc", "*", "plugin", "local", "pid"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil || syscall.Kill(pid, 0) != nil {
				continue
			}
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if !strings.Contains(string(cmd), "csi-hostpath") {
				continue
			}
			mode := "node"
			if strings.Contains(string(cmd), "controller") {
				mode = "controller"
			}
			out = append(out, pluginPID{pid, cl.name + " " + mode + " plugin pid " + strconv.Itoa(pid)})
		}
	}
	return out
}

// fillDisk writes path until its filesystem has no byte left.
func fillDisk(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return nil
			}
			return err
		}
	}
}
