package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"berth.dev/berth/internal/containerdtest"
	"berth.dev/berth/internal/ociarchive"
)

// The containerd section's set-up: a containerd (BERTH_CONTAINERD_ADDRESS's,
// or a private one this process starts and stops by PID), the bench's image
// imported into it from an OCI archive the bench writes, and the containerd
// driver plugin built from examples/containerd into a plugin dir of its own.

// ctrdAddressEnv names a containerd socket used instead of a private one
// (make test's set-up starts one and sets it).
const ctrdAddressEnv = containerdtest.EnvAddress

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
	daemon    *containerdtest.Daemon // nil when the containerd is not ours
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
	if err := ociarchive.WriteFile(archive, sleeperImage(sleeper)); err != nil {
		return nil, fmt.Errorf("writing the bench image: %w", err)
	}
	if e.addr = os.Getenv(ctrdAddressEnv); e.addr == "" {
		// Its own directory under the bench's: Stop removes only what
		// Start made, and the socket path stays short.
		if e.daemon, err = containerdtest.Start(context.Background(), filepath.Join(dir, "c")); err != nil {
			return nil, fmt.Errorf("a private containerd: %w", err)
		}
		e.addr = e.daemon.Address
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
	if e.daemon != nil {
		if err := e.daemon.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "bench: stopping the private containerd: %v\n", err)
		}
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

// sleeperImage is the bench image: the static binary at sleeper as
// /ctrsleep, its entrypoint.
func sleeperImage(sleeper string) ociarchive.Image {
	return ociarchive.Image{
		Name:       ctrdBenchImage,
		Files:      []ociarchive.File{{Path: "/ctrsleep", Source: sleeper, Mode: 0o755}},
		Entrypoint: []string{"/ctrsleep"},
		WorkingDir: "/",
	}
}
