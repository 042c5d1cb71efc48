package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// netLab is the run's network: a hub namespace holding a bridge, and one
// namespace per agent joined to it by a veth pair. Nothing is created in
// the test's own namespace: the test reaches the agents from the hub
// (dialInHub), so a partition inside an agent's namespace spares the
// test's view of it. Names carry the run's ID and the /24 is picked per
// run, so parallel runs never meet.
type netLab struct {
	t      *testing.T
	id     string
	hub    string
	prefix string // "10.a.b."
	nss    []string
}

func newNetLab(t *testing.T) *netLab {
	t.Helper()
	l := &netLab{
		t:      t,
		id:     fmt.Sprintf("%06x", rand.IntN(1<<24)),
		prefix: fmt.Sprintf("10.%d.%d.", 100+rand.IntN(100), rand.IntN(256)),
	}
	l.hub = "bch-" + l.id + "-hub"
	t.Cleanup(l.teardown)
	if err := ipCmd("netns", "add", l.hub); err != nil {
		t.Fatalf("creating the hub namespace: %v", err)
	}
	l.nss = append(l.nss, l.hub)
	l.must("-n", l.hub, "link", "set", "lo", "up")
	l.must("-n", l.hub, "link", "add", "br0", "type", "bridge")
	l.must("-n", l.hub, "addr", "add", l.prefix+"1/24", "dev", "br0")
	l.must("-n", l.hub, "link", "set", "br0", "up")
	return l
}

// addNode makes name's namespace, joined to the bridge with address
// prefix+host, and returns the namespace and the address.
func (l *netLab) addNode(name string, host int) (ns, addr string) {
	l.t.Helper()
	ns = "bch-" + l.id + "-" + name
	addr = fmt.Sprintf("%s%d", l.prefix, host)
	l.must("netns", "add", ns)
	l.nss = append(l.nss, ns)
	veth := "bc" + l.id + name
	l.must("-n", ns, "link", "set", "lo", "up")
	l.must("-n", l.hub, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
	l.must("-n", l.hub, "link", "set", veth, "master", "br0")
	l.must("-n", l.hub, "link", "set", veth, "up")
	l.must("-n", ns, "addr", "add", addr+"/24", "dev", "eth0")
	l.must("-n", ns, "link", "set", "eth0", "up")
	return ns, addr
}

func (l *netLab) must(args ...string) {
	l.t.Helper()
	if err := ipCmd(args...); err != nil {
		l.t.Fatal(err)
	}
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// inNS runs a command in namespace ns's network (nft, tc).
func inNS(ns string, name string, args ...string) error {
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s in %s: %s %s: %v: %s", name, ns, name, strings.Join(args, " "), err, out)
	}
	return nil
}

// teardown deletes every namespace the run made (their veths and the
// bridge go with them), agent namespaces first.
func (l *netLab) teardown() {
	for i := len(l.nss) - 1; i >= 0; i-- {
		if err := ipCmd("netns", "del", l.nss[i]); err != nil {
			l.t.Errorf("tearing down: %v", err)
		}
	}
	out, _ := exec.Command("ip", "netns", "list").Output()
	if strings.Contains(string(out), "bch-"+l.id) {
		l.t.Errorf("namespaces of run %s left behind:\n%s", l.id, out)
	}
}

// dialInHub opens a connection from the hub namespace: the socket is made
// on a thread moved there, and keeps its namespace after the thread moves
// back.
func (l *netLab) dialInHub(ctx context.Context, network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		c, back, err := l.dialOnThread(ctx, network, addr)
		if back {
			runtime.UnlockOSThread()
		} // else the thread is left locked and dies with the goroutine
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

func (l *netLab) dialOnThread(ctx context.Context, network, addr string) (net.Conn, bool, error) {
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, true, err
	}
	defer unix.Close(orig)
	hub, err := unix.Open("/var/run/netns/"+l.hub, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, true, err
	}
	defer unix.Close(hub)
	if err := unix.Setns(hub, unix.CLONE_NEWNET); err != nil {
		return nil, true, fmt.Errorf("entering %s: %w", l.hub, err)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	back := unix.Setns(orig, unix.CLONE_NEWNET) == nil
	return c, back, err
}
