package drivers

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	hclog "github.com/hashicorp/go-hclog"

	"berth.dev/berth/builtin/drivers/mock"
	"berth.dev/berth/builtin/drivers/rawexec"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/executor"
)

// ErrUnknown is returned by New and Main for a name that is not a built-in
// driver.
var ErrUnknown = errors.New("unknown built-in driver")

// Builtin is one driver shipped in the binary.
type Builtin struct {
	// Name is the driver's name in job specs.
	Name string
	// DevOnly drivers are offered by dev agents, and by others only when
	// the agent config has a plugin block for them.
	DevOnly bool
	// New creates the driver; it runs inside the plugin process.
	New func(hclog.Logger) sdk.Driver
}

// catalog lists the built-in drivers, sorted by name.
var catalog = []Builtin{
	{Name: mock.Name, DevOnly: true, New: func(l hclog.Logger) sdk.Driver { return mock.New(l) }},
	{Name: rawexec.Name, New: func(l hclog.Logger) sdk.Driver { return rawexec.New(l) }},
}

// All returns the built-in drivers, sorted by name.
func All() []Builtin { return slices.Clone(catalog) }

// Lookup returns the built-in driver called name.
func Lookup(name string) (Builtin, bool) {
	for _, b := range catalog {
		if b.Name == name {
			return b, true
		}
	}
	return Builtin{}, false
}

// New creates the built-in driver called name, or returns ErrUnknown.
func New(name string, logger hclog.Logger) (sdk.Driver, error) {
	b, ok := Lookup(name)
	if !ok {
		return nil, fmt.Errorf("%w %q (built in: %s)", ErrUnknown, name, names())
	}
	return b.New(logger), nil
}

func names() string {
	out := make([]string, len(catalog))
	for i, b := range catalog {
		out[i] = b.Name
	}
	return strings.Join(out, ", ")
}

// argsPrefix are the command-line arguments, after the executable, that
// select a built-in driver; the driver's name follows them.
var argsPrefix = []string{"builtin", "driver"}

// Args returns the arguments (after the executable) that make the berth
// binary serve the built-in driver name.
func Args(name string) []string { return append(slices.Clone(argsPrefix), name) }

// Requested returns the name of the built-in driver that args (os.Args,
// executable first) ask this process to serve, if they do.
func Requested(args []string) (string, bool) {
	if len(args) != len(argsPrefix)+2 || !slices.Equal(args[1:len(argsPrefix)+1], argsPrefix) {
		return "", false
	}
	return args[len(args)-1], true
}

// Serve serves the built-in driver name on this process's stdio until
// berth shuts the plugin down. When this process was started as a task
// executor it runs the executor and exits instead. It returns ErrUnknown
// for an unknown name and sdk.ErrNotPluginProcess when the process was not
// started by berth.
func Serve(name string) error {
	if executor.Requested() {
		os.Exit(executor.Main())
	}
	d, err := New(name, sdk.NewPluginLogger(name))
	if err != nil {
		return err
	}
	return sdk.ServeDriver(d)
}

// MainIfRequested serves a built-in driver and exits when args (os.Args)
// ask for one, runs the executor and exits when the process is a task
// executor, and otherwise returns at once. Test binaries that stand in for
// berth call it first thing in TestMain.
func MainIfRequested(args []string) {
	if executor.Requested() {
		os.Exit(executor.Main())
	}
	name, ok := Requested(args)
	if !ok {
		return
	}
	if err := Serve(name); err != nil {
		fmt.Fprintf(os.Stderr, "builtin driver %s: %v\n", name, err)
		os.Exit(1)
	}
	os.Exit(0)
}
