package cli

import (
	"io"
	"slices"
	"testing"

	"github.com/urfave/cli/v2"
)

// walkCommands calls fn for every command of the tree, depth first.
func walkCommands(cmds []*cli.Command, fn func(*cli.Command)) {
	for _, c := range cmds {
		fn(c)
		walkCommands(c.Subcommands, fn)
	}
}

// flagNamed reads the names of berth's flag types without Names(): it
// must agree with Names() for every flag the tree declares.
func TestFlagNamedAgreesWithNames(t *testing.T) {
	app := newApp(io.Discard, io.Discard)
	check := func(where string, flags []cli.Flag) {
		for _, f := range flags {
			names := f.Names()
			for _, n := range names {
				if !flagNamed(f, n) {
					t.Errorf("%s: flag %v: flagNamed(%q) is false, Names() = %q", where, f, n, names)
				}
			}
			for _, other := range []string{"address", "token", "json", "ca-cert"} {
				if flagNamed(f, other) != slices.Contains(names, other) {
					t.Errorf("%s: flag %v: flagNamed(%q) = %t, Names() = %q", where, f, other, flagNamed(f, other), names)
				}
			}
		}
	}
	check("berth", app.Flags)
	walkCommands(app.Commands, func(c *cli.Command) { check(c.FullName(), c.Flags) })
}

// Building the command tree is what every command pays before it runs,
// `berth version` too (issue 26). Asking urfave/cli's Names() of every
// flag of every command (a regexp per name) made it 2,315 allocations;
// without it 589. The bound leaves room for new commands, not for that
// again.
func TestBuildingTheCommandTreeAllocatesLittle(t *testing.T) {
	allocs := testing.AllocsPerRun(20, func() { newApp(io.Discard, io.Discard) })
	t.Logf("newApp: %.0f allocations", allocs)
	if allocs > 1000 {
		t.Errorf("building the command tree allocates %.0f times (bound 1,000): every berth command pays it at start-up", allocs)
	}
}
