package cli

import (
	"slices"

	"github.com/urfave/cli/v2"
)

// hasFlag reports whether one of flags is named name (or has it as an
// alias). urfave/cli's Flag.Names() runs a regexp over each name and
// allocates a slice: building the command tree asks this of every flag of
// every command (withTokenFlag, addTLSFlags), which every berth command,
// `berth version` too, paid at start-up (issue 26). The flag types berth
// declares are read directly; any other asks Names().
func hasFlag(flags []cli.Flag, name string) bool {
	return slices.ContainsFunc(flags, func(f cli.Flag) bool { return flagNamed(f, name) })
}

func flagNamed(f cli.Flag, name string) bool {
	var n string
	var aliases []string
	switch f := f.(type) {
	case *cli.StringFlag:
		n, aliases = f.Name, f.Aliases
	case *cli.BoolFlag:
		n, aliases = f.Name, f.Aliases
	case *cli.StringSliceFlag:
		n, aliases = f.Name, f.Aliases
	case *cli.DurationFlag:
		n, aliases = f.Name, f.Aliases
	case *cli.IntFlag:
		n, aliases = f.Name, f.Aliases
	case *cli.Int64Flag:
		n, aliases = f.Name, f.Aliases
	case *cli.Uint64Flag:
		n, aliases = f.Name, f.Aliases
	case *cli.GenericFlag:
		n, aliases = f.Name, f.Aliases
	default:
		return slices.Contains(f.Names(), name)
	}
	// Names() strips what follows a comma or a space (urfave/cli v1's
	// "name, alias" form); berth's names have neither, which
	// TestFlagNamedAgreesWithNames checks for every flag of the tree.
	return n == name || slices.Contains(aliases, name)
}
