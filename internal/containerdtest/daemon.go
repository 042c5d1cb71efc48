package containerdtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"berth.dev/berth/sdk/executor"
)

// EnvAddress names the containerd socket tests use (see Address).
const EnvAddress = "BERTH_CONTAINERD_ADDRESS"

// Namespace is the containerd namespace this package's own tests use.
const Namespace = "berth-containerdtest"

// Timeouts of Start and Stop.
const (
	// StartTimeout bounds the wait for a started daemon's socket.
	StartTimeout = 30 * time.Second
	// StopTimeout is how long the daemon has to stop after SIGTERM.
	StopTimeout = 10 * time.Second
)

// errUnavailable is what Start's errors wrap when containerd cannot run on
// this machine at all (not root, a binary missing), as opposed to a daemon
// that failed.
var errUnavailable = errors.New("containerd cannot run here")

// Unavailable reports whether err (from Start) says containerd cannot run
// on this machine: not root, or containerd or runc not installed.
func Unavailable(err error) bool { return errors.Is(err, errUnavailable) }

// Daemon is a private containerd this process started.
type Daemon struct {
	// Dir holds its config, socket, root, state and log.
	Dir string
	// Address is its gRPC socket.
	Address string
	// Log is its log file (stdout and stderr).
	Log string

	cmd    *exec.Cmd
	exited chan struct{}
	ownDir bool
	// ready: it answered on its socket, so it may run containers.
	ready bool
}

// Start starts a private containerd under dir (a new temporary directory
// when dir is empty, removed by Stop) and returns once it answers on its
// socket. Socket paths are limited to 107 bytes: dir should be short.
func Start(ctx context.Context, dir string) (*Daemon, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: containerd needs root (run as root)", errUnavailable)
	}
	bin, err := exec.LookPath("containerd")
	if err != nil {
		return nil, fmt.Errorf("%w: no containerd binary in PATH (Debian: apt-get install containerd runc; make containerd-deps does it)", errUnavailable)
	}
	if _, err := exec.LookPath("runc"); err != nil {
		return nil, fmt.Errorf("%w: no runc binary in PATH (Debian: apt-get install runc)", errUnavailable)
	}
	d := &Daemon{Dir: dir}
	if dir == "" {
		if d.Dir, err = os.MkdirTemp("", "berth-containerd-"); err != nil {
			return nil, err
		}
		d.ownDir = true
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	d.Address = filepath.Join(d.Dir, "containerd.sock")
	d.Log = filepath.Join(d.Dir, "containerd.log")
	if len(d.Address)+len(".ttrpc") > 107 {
		d.removeDir()
		return nil, fmt.Errorf("containerd socket %s: longer than a unix socket address holds (107 bytes); use a shorter directory", d.Address)
	}
	config := filepath.Join(d.Dir, "config.toml")
	if err := os.WriteFile(config, []byte(configTOML(d.Dir, d.Address)), 0o600); err != nil {
		d.removeDir()
		return nil, err
	}
	logf, err := os.Create(d.Log)
	if err != nil {
		d.removeDir()
		return nil, err
	}
	defer logf.Close()
	d.cmd = exec.Command(bin, "--config", config)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	// Its own process group: a terminal's Ctrl-C reaches the test runner,
	// which stops the daemon in order (its tasks first).
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		d.removeDir()
		return nil, fmt.Errorf("starting containerd: %w", err)
	}
	d.exited = make(chan struct{})
	go func() {
		_ = d.cmd.Wait()
		close(d.exited)
	}()
	if err := d.waitReady(ctx); err != nil {
		_ = d.Stop()
		return nil, err
	}
	return d, nil
}

// configTOML is the daemon's config: version 2, which containerd 1.6 to 2.x
// read.
func configTOML(dir, address string) string {
	return fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]

[grpc]
  address = %q

[ttrpc]
  address = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), address, address+".ttrpc")
}

// waitReady waits until the socket accepts a connection (containerd listens
// once its plugins are loaded), the daemon exits, or StartTimeout passes.
func (d *Daemon) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if c, err := net.Dial("unix", d.Address); err == nil {
			c.Close()
			d.ready = true
			return nil
		}
		select {
		case <-d.exited:
			return fmt.Errorf("containerd exited before it listened (%s): %s", d.cmd.ProcessState, d.tail())
		case <-ctx.Done():
			return fmt.Errorf("containerd did not listen on %s within %s: %s", d.Address, StartTimeout, d.tail())
		case <-tick.C:
		}
	}
}

// tail is the end of the daemon's log, for errors.
func (d *Daemon) tail() string {
	b, err := os.ReadFile(d.Log)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return "log " + d.Log + ":\n" + strings.Join(lines[max(0, len(lines)-20):], "\n")
}

// Ctr runs ctr against the daemon and returns its combined output.
func (d *Daemon) Ctr(ctx context.Context, args ...string) (string, error) {
	return ctr(ctx, d.Address, args...)
}

func ctr(ctx context.Context, address string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", address}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// Stop ends the daemon and what it ran (see the package doc) and removes
// its directory when Start made it. It returns the first thing that went
// wrong; the later steps run regardless.
func (d *Daemon) Stop() error {
	var errs []error
	select {
	case <-d.exited:
	default:
		if d.ready {
			errs = append(errs, d.removeLeftovers())
		}
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(StopTimeout):
			_ = d.cmd.Process.Signal(syscall.SIGKILL)
			<-d.exited
		}
	}
	errs = append(errs, d.killShims(), d.unmount())
	if d.ownDir {
		errs = append(errs, d.removeDir())
	}
	return errors.Join(errs...)
}

// removeLeftovers kills and deletes the tasks and containers left in every
// namespace, so no container outlives the daemon.
func (d *Daemon) removeLeftovers() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := d.Ctr(ctx, "namespaces", "list", "--quiet")
	if err != nil {
		return err
	}
	var errs []error
	for _, ns := range strings.Fields(out) {
		tasks, err := d.Ctr(ctx, "--namespace", ns, "tasks", "list", "--quiet")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, id := range strings.Fields(tasks) {
			if _, err := d.Ctr(ctx, "--namespace", ns, "tasks", "delete", "--force", id); err != nil {
				errs = append(errs, err)
			}
		}
		containers, err := d.Ctr(ctx, "--namespace", ns, "containers", "list", "--quiet")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, id := range strings.Fields(containers) {
			if _, err := d.Ctr(ctx, "--namespace", ns, "containers", "delete", id); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// killShims kills, by PID, the shims this daemon started that outlived it:
// their command line names its socket after -address.
func (d *Daemon) killShims() error {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if i := slices.Index(args, "-address"); i >= 0 && i+1 < len(args) && args[i+1] == d.Address &&
			strings.Contains(filepath.Base(args[0]), "containerd-shim") {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return nil
}

// unmount detaches whatever is mounted under the directory (the rootfs of
// a container that could not be deleted), deepest first.
func (d *Daemon) unmount() error {
	points, err := executor.MountPoints()
	if err != nil {
		return err
	}
	var under []string
	for _, p := range points {
		if strings.HasPrefix(p, d.Dir+"/") {
			under = append(under, p)
		}
	}
	slices.SortFunc(under, func(a, b string) int { return len(b) - len(a) })
	var errs []error
	for _, p := range under {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

func (d *Daemon) removeDir() error {
	if !d.ownDir {
		return nil
	}
	return os.RemoveAll(d.Dir)
}

// PID is the daemon's process ID.
func (d *Daemon) PID() int { return d.cmd.Process.Pid }
