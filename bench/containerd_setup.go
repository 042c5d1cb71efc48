package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The containerd section's set-up: a containerd (BERTH_CONTAINERD_ADDRESS's,
// or a private one this process starts and stops by PID), the bench's image
// imported into it from an OCI archive the bench writes, and the containerd
// driver plugin built from examples/containerd into a plugin dir of its own.

// ctrdAddressEnv names a containerd socket used instead of a private one
// (make test's set-up starts one and sets it).
const ctrdAddressEnv = "BERTH_CONTAINERD_ADDRESS"

const (
	// ctrdBenchImage is the bench image's reference.
	ctrdBenchImage = "berth.bench/ctrsleep:1"
	// ctrdNamespace is the containerd driver's default namespace; ctr
	// runs its containers there too, from the same image.
	ctrdNamespace = "berth"
)

type ctrdEnv struct {
	addr      string
	dir       string // the bench's temp dir: archive, plugins, private containerd
	pluginDir string
	stopCtrd  func() // nil when the containerd is not ours
}

// ctrdUnavailable says why this machine cannot run the section, or "".
func ctrdUnavailable() string {
	if os.Geteuid() != 0 {
		return "needs root to run containers"
	}
	bins := []string{"ctr", "runc"}
	if os.Getenv(ctrdAddressEnv) == "" {
		bins = append(bins, "containerd")
	}
	for _, b := range bins {
		if _, err := exec.LookPath(b); err != nil {
			return fmt.Sprintf("needs %s (Debian package containerd/runc)", b)
		}
	}
	return ""
}

// setUpContainerd readies everything the section runs against; close
// undoes it.
func setUpContainerd() (_ *ctrdEnv, err error) {
	if why := ctrdUnavailable(); why != "" {
		return nil, errors.New("the containerd section " + why)
	}
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	// Unix socket paths are short: a short temp dir.
	dir, err := os.MkdirTemp("", "berth-bctrd-")
	if err != nil {
		return nil, err
	}
	e := &ctrdEnv{dir: dir, pluginDir: filepath.Join(dir, "plugins")}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	sleeper := filepath.Join(dir, "ctrsleep")
	if err := goBuild(root, []string{"CGO_ENABLED=0"}, "-trimpath", "-o", sleeper, "./bench/ctrsleep"); err != nil {
		return nil, err
	}
	if err := goBuild(filepath.Join(root, "examples", "containerd"), nil, "-o", filepath.Join(e.pluginDir, "containerd"), "."); err != nil {
		return nil, err
	}
	archive := filepath.Join(dir, "ctrsleep.oci.tar")
	if err := writeSleeperArchive(archive, sleeper); err != nil {
		return nil, fmt.Errorf("writing the bench image: %w", err)
	}
	if e.addr = os.Getenv(ctrdAddressEnv); e.addr == "" {
		e.addr, e.stopCtrd, err = startPrivateContainerd(filepath.Join(dir, "c"))
		if err != nil {
			return nil, err
		}
	}
	if out, err := e.ctr("images", "import", archive); err != nil {
		return nil, fmt.Errorf("ctr images import: %w\n%s", err, out)
	}
	return e, nil
}

// ctr runs ctr against the section's containerd, in its namespace.
func (e *ctrdEnv) ctr(args ...string) ([]byte, error) {
	return exec.Command("ctr", append([]string{"--address", e.addr, "--namespace", ctrdNamespace}, args...)...).CombinedOutput()
}

// close removes the image from a containerd that is not ours, stops ours,
// and removes the temp dir.
func (e *ctrdEnv) close() {
	if e.stopCtrd != nil {
		e.stopCtrd()
	} else if e.addr != "" {
		_, _ = e.ctr("images", "rm", ctrdBenchImage)
	}
	_ = os.RemoveAll(e.dir)
}

// moduleRoot is the root module's directory (bench runs from it, its test
// from bench/).
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("the containerd section runs inside berth's source tree (it builds examples/containerd)")
	}
	return filepath.Dir(mod), nil
}

func goBuild(dir string, env []string, args ...string) error {
	cmd := exec.Command("go", append([]string{"build"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s in %s: %w\n%s", strings.Join(args, " "), dir, err, out)
	}
	return nil
}

// startPrivateContainerd runs containerd with its root, state, config and
// socket under dir, and returns its socket and a stop that ends it by PID
// (SIGTERM, SIGKILL after 10s) and detaches what it left mounted.
func startPrivateContainerd(dir string) (string, func(), error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, err
	}
	addr := filepath.Join(dir, "containerd.sock")
	config := fmt.Sprintf("version = 2\nroot = %q\nstate = %q\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n[grpc]\n  address = %q\n[ttrpc]\n  address = %q\n",
		filepath.Join(dir, "root"), filepath.Join(dir, "state"), addr, addr+".ttrpc")
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(config), 0o600); err != nil {
		return "", nil, err
	}
	logPath := filepath.Join(dir, "containerd.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return "", nil, err
	}
	defer logf.Close()
	cmd := exec.Command("containerd", "--config", filepath.Join(dir, "config.toml"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // an interrupt of the bench does not reach it first
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		unmountUnder(dir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		if conn, err := net.Dial("unix", addr); err == nil {
			conn.Close()
			return addr, stop, nil
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(logPath)
			unmountUnder(dir)
			return "", nil, fmt.Errorf("containerd exited at start:\n%s", log)
		case <-ctx.Done():
			stop()
			return "", nil, fmt.Errorf("containerd's socket %s did not appear in 30s (log %s)", addr, logPath)
		case <-time.After(20 * time.Millisecond): // start-up only, not a measured path
		}
	}
}

// unmountUnder detaches whatever is mounted under dir (overlays of
// containers a failed run left), deepest first.
func unmountUnder(dir string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			points = append(points, f[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		_ = syscall.Unmount(points[i], syscall.MNT_DETACH)
	}
}

// writeSleeperArchive writes an OCI image layout archive of
// ctrdBenchImage: one uncompressed layer holding the static binary at
// sleeper as /ctrsleep, its entrypoint.
func writeSleeperArchive(path, sleeper string) error {
	prog, err := os.ReadFile(sleeper)
	if err != nil {
		return err
	}
	var layer bytes.Buffer
	if err := writeTar(&layer, []tarFile{{"ctrsleep", prog, 0o755}}); err != nil {
		return err
	}
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Entrypoint": []string{"/ctrsleep"}, "WorkingDir": "/"},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{sha256Digest(layer.Bytes())}},
	})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": ociDescriptor("application/vnd.oci.image.config.v1+json", config, nil),
		"layers": []any{ociDescriptor("application/vnd.oci.image.layer.v1.tar", layer.Bytes(), nil)},
	})
	if err != nil {
		return err
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
		"manifests": []any{ociDescriptor("application/vnd.oci.image.manifest.v1+json", manifest, map[string]string{
			"io.containerd.image.name": ctrdBenchImage, "org.opencontainers.image.ref.name": ctrdBenchImage})},
	})
	if err != nil {
		return err
	}
	blob := func(b []byte) string { return "blobs/sha256/" + strings.TrimPrefix(sha256Digest(b), "sha256:") }
	var out bytes.Buffer
	if err := writeTar(&out, []tarFile{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644},
		{"index.json", index, 0o644},
		{blob(manifest), manifest, 0o644},
		{blob(config), config, 0o644},
		{blob(layer.Bytes()), layer.Bytes(), 0o644},
	}); err != nil {
		return err
	}
	return os.WriteFile(path, out.Bytes(), 0o644)
}

type tarFile struct {
	name string
	data []byte
	mode int64
}

func writeTar(w *bytes.Buffer, files []tarFile) error {
	tw := tar.NewWriter(w)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

func sha256Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func ociDescriptor(mediaType string, b []byte, annotations map[string]string) map[string]any {
	d := map[string]any{"mediaType": mediaType, "digest": sha256Digest(b), "size": len(b)}
	if annotations != nil {
		d["annotations"] = annotations
	}
	return d
}
