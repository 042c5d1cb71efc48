package drivers

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	execdriver "berth.dev/berth/builtin/drivers/exec"
	"berth.dev/berth/builtin/drivers/mock"
	"berth.dev/berth/builtin/drivers/rawexec"
	"berth.dev/berth/internal/pluginsup"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/executor"
)

// Constructor builds a driver, logging through logger.
type Constructor func(logger hclog.Logger) sdk.Driver

// Builtin is one driver shipped in the berth binary.
type Builtin struct {
	// Name is the driver's name in job specs.
	Name string
	// DevOnly drivers are offered in dev mode, or when a plugin block
	// names them; they exist for testing berth, not for production.
	DevOnly bool
	// New builds the driver.
	New Constructor
	// TaskSchema is the schema of the driver's task config.
	TaskSchema *driverpb.Schema
}

// All returns the built-in drivers, sorted by name.
func All() []Builtin {
	return []Builtin{
		{Name: execdriver.Name, TaskSchema: execdriver.TaskSchema(),
			New: func(l hclog.Logger) sdk.Driver { return execdriver.New(l) }},
		{Name: mock.Name, DevOnly: true, TaskSchema: mock.TaskSchema(),
			New: func(l hclog.Logger) sdk.Driver { return mock.New(l) }},
		{Name: rawexec.Name, TaskSchema: rawexec.TaskSchema(),
			New: func(l hclog.Logger) sdk.Driver { return rawexec.New(l) }},
	}
}

// Builtins returns the built-in drivers' constructors by name. The map is
// new on each call.
func Builtins() map[string]Constructor {
	out := map[string]Constructor{}
	for _, b := range All() {
		out[b.Name] = b.New
	}
	return out
}

// Names returns the names of the built-in drivers, sorted.
func Names() []string {
	var out []string
	for _, b := range All() {
		out = append(out, b.Name)
	}
	return out
}

// Plugins is the built-in drivers as the driver catalog takes them
// (taskdrivers.CatalogConfig.Builtins): the agent hands them in, so that
// the plugin machinery links none of them.
func Plugins() []pluginsup.Builtin {
	var out []pluginsup.Builtin
	for _, b := range All() {
		out = append(out, pluginsup.Builtin{Name: b.Name, Args: Args(b.Name), DevOnly: b.DevOnly})
	}
	return out
}

// Args are the arguments (after the berth executable) that start the
// built-in driver name as a plugin: `berth builtin driver NAME`.
func Args(name string) []string { return []string{"builtin", "driver", name} }

// Serve serves the built-in driver name as a go-plugin plugin and returns
// when berth shuts the plugin down. `berth builtin driver NAME` calls it.
func Serve(name string) error {
	newDriver, ok := Builtins()[name]
	if !ok {
		return fmt.Errorf("unknown built-in driver %q (built in: %s)", name, strings.Join(Names(), ", "))
	}
	if executor.Requested() {
		// An executor re-executed by the driver: not the plugin, so it
		// must not run the driver's start-up work.
		os.Exit(executor.Main())
	}
	d := newDriver(sdk.NewPluginLogger(name))
	if s, ok := d.(starter); ok {
		s.PluginStart()
	}
	err := sdk.ServeDriver(d)
	if s, ok := d.(shutdowner); ok && err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), shutdownWait)
		defer cancel()
		s.Shutdown(ctx)
	}
	return err
}

// starter is a driver with work to do as its plugin process starts
// (exec's sweep of the cgroups an earlier process left).
type starter interface{ PluginStart() }

// shutdowner is a driver with work to finish before its plugin process
// exits (exec's background cgroup removals).
type shutdowner interface{ Shutdown(ctx context.Context) }

// shutdownWait bounds a driver's Shutdown: go-plugin kills a plugin that
// has not exited 2 s after berth asked it to.
const shutdownWait = 1500 * time.Millisecond

// MainIfRequested serves a built-in driver and exits when args (os.Args)
// are a binary followed by Args(name); otherwise it returns at once. A
// test binary standing in for berth calls it first thing in TestMain, so
// the plugin manager can start built-in drivers (and raw_exec its
// executors) by re-executing it exactly as it would re-execute berth.
func MainIfRequested(args []string) {
	if len(args) != 4 || args[1] != "builtin" || args[2] != "driver" {
		return
	}
	if err := Serve(args[3]); err != nil {
		fmt.Fprintf(os.Stderr, "builtin driver %s: %v\n", args[3], err)
		os.Exit(1)
	}
	os.Exit(0)
}
