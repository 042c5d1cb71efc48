// Command withcontainerd runs a command with a private containerd daemon
// (package internal/containerdtest) up for its whole run, its socket in
// BERTH_CONTAINERD_ADDRESS; `make test` runs the module tests under it, so
// every test that needs containerd shares one daemon.
//
// When BERTH_CONTAINERD_ADDRESS is already set (the machine's containerd,
// say) the command runs with it as it is. When containerd cannot run (not
// root, containerd or runc missing, a daemon that fails to start) the
// command runs without the variable, and the tests that need containerd
// skip saying why; under CI=true that is an error instead (exit 1, the
// command not run), since CI must test the containerd driver.
//
// The daemon is stopped by its PID when the command ends, or when this
// program gets SIGINT or SIGTERM (passed on to the command first), with
// every container it still runs; its directory is removed. The exit status
// is the command's.
//
// Usage: go run ./internal/withcontainerd [-dir DIR] -- COMMAND [ARG...]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"berth.dev/berth/internal/containerdtest"
	"berth.dev/berth/internal/testutil"
)

func main() {
	dir := flag.String("dir", "", "the daemon's directory (default: a new temporary one, removed at the end)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: withcontainerd [-dir DIR] -- COMMAND [ARG...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	os.Exit(run(*dir, flag.Args()))
}

func run(dir string, argv []string) int {
	// Caught from here on: a Ctrl-C while the daemon starts must still
	// stop it.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	var d *containerdtest.Daemon
	if addr := os.Getenv(containerdtest.EnvAddress); addr != "" {
		fmt.Fprintf(os.Stderr, "withcontainerd: using %s=%s\n", containerdtest.EnvAddress, addr)
	} else {
		var err error
		d, err = containerdtest.Start(context.Background(), dir)
		switch {
		case err != nil && testutil.InCI():
			fmt.Fprintf(os.Stderr, "withcontainerd: %v (CI=true: the containerd tests must run)\n", err)
			return 1
		case err != nil:
			fmt.Fprintf(os.Stderr, "withcontainerd: %v; the tests that need containerd will be skipped\n", err)
		default:
			fmt.Fprintf(os.Stderr, "withcontainerd: private containerd (pid %d) at %s\n", d.PID(), d.Address)
			os.Setenv(containerdtest.EnvAddress, d.Address)
		}
	}
	code := runCommand(argv, sigs)
	if d != nil {
		if err := d.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "withcontainerd: stopping the private containerd: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// runCommand runs argv, passing on the signals that reach this program,
// and returns its exit status.
func runCommand(argv []string, sigs <-chan os.Signal) int {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "withcontainerd: %v\n", err)
		return 127
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case s := <-sigs:
			_ = cmd.Process.Signal(s)
		case err := <-done:
			var exit *exec.ExitError
			switch {
			case err == nil:
				return 0
			case errors.As(err, &exit) && exit.ExitCode() >= 0:
				return exit.ExitCode()
			default:
				fmt.Fprintf(os.Stderr, "withcontainerd: %s: %v\n", argv[0], err)
				return 1
			}
		}
	}
}
