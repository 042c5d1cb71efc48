package cli

import (
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// flagsFirst returns args (os.Args: the program, then its arguments) with
// the flags of the command they run moved before its positional
// arguments, so `berth alloc logs ALLOC -f` means what `berth alloc logs
// -f ALLOC` does. urfave/cli, like Go's flag package, stops reading flags
// at the first positional argument, so without this every flag after an
// ID was taken for one more argument (the task name, here).
//
// The command is found by walking the command tree over the arguments
// (global flags and parent commands' flags stay where they are); its own
// arguments are then split into flags, each with its value when the flag
// takes one and is not given as -flag=value, and positional arguments,
// which follow an added "--" so none of them is read as a flag. A "--"
// the user typed still ends the flags: everything after it is
// positional. A token that names no flag of the command is moved as a
// flag without a value, for the parser to refuse. Arguments that do not
// lead to a command (an unknown command name) and shell-completion runs
// are left as they are.
func flagsFirst(app *cli.App, args []string) []string {
	if len(args) < 2 || args[len(args)-1] == "--generate-bash-completion" {
		return args
	}
	flags, cmds := app.Flags, app.Commands
	for i := 1; i < len(args); {
		if a := args[i]; isFlag(a) {
			if a == "--" {
				return args
			}
			i += flagTokens(flags, args[i:])
			continue
		}
		var cmd *cli.Command
		for _, c := range cmds {
			if c.HasName(args[i]) {
				cmd = c
				break
			}
		}
		if cmd == nil {
			return args
		}
		i++
		if len(cmd.Subcommands) > 0 {
			flags, cmds = cmd.Flags, cmd.Subcommands
			continue
		}
		out := append([]string(nil), args[:i]...)
		rest, unknown := reorder(cmd.Flags, args[i:])
		if len(unknown) > 0 {
			if app.Metadata == nil {
				app.Metadata = map[string]any{}
			}
			app.Metadata[unknownFlagsKey] = unknown
		}
		return append(out, rest...)
	}
	return args
}

// unknownFlagsKey is the cli.App.Metadata key under which flagsFirst
// records the tokens after an argument that looked like flags of the
// command but name none, for flagUsageError's hint.
const unknownFlagsKey = "unknownFlags"

// reorder puts a leaf command's flags before its positional arguments. It
// also returns the tokens after an argument that name no flag of the
// command: arguments starting with '-', perhaps, that belong after "--".
func reorder(flags []cli.Flag, args []string) (_ []string, unknown []string) {
	var lead, positional []string
	help := false
	for i := 0; i < len(args); {
		a := args[i]
		if a == "--" {
			positional = append(positional, args[i+1:]...)
			break
		}
		if !isFlag(a) {
			positional = append(positional, a)
			i++
			continue
		}
		n := flagTokens(flags, args[i:])
		if n > len(args)-i {
			// A flag that takes a value ends the line without one: left
			// last, the parser refuses it ("flag needs an argument")
			// rather than taking the positional arguments or a "--" for
			// its value.
			return append(lead, a), unknown
		}
		if len(positional) > 0 && !isHelp(a) && !hasFlag(flags, flagName(a)) {
			unknown = append(unknown, a)
		}
		help = help || isHelp(a)
		lead = append(lead, args[i:i+n]...)
		i += n
	}
	if len(positional) == 0 || help {
		// urfave/cli's help takes an argument for a subcommand to show:
		// `alloc logs ALLOC -h` asks for the command's help.
		return lead, unknown
	}
	return append(append(lead, "--"), positional...), unknown
}

// isHelp reports whether the flag token a is the help flag (-h, --help).
func isHelp(a string) bool {
	return cli.HelpFlag != nil && slices.Contains(cli.HelpFlag.Names(), flagName(a))
}

// flagName is a flag token's name: "--c=5" → "c".
func flagName(a string) string {
	name, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
	return name
}

// isFlag reports whether a command-line token is a flag (or "--"); a lone
// "-" is an argument (stdin).
func isFlag(a string) bool { return len(a) > 1 && a[0] == '-' }

// flagTokens is how many tokens the flag at args[0] spans: 2 when it takes
// a value given as the next token, else 1. The value may be missing: the
// caller checks the count against what is left.
func flagTokens(flags []cli.Flag, args []string) int {
	if strings.Contains(args[0], "=") {
		return 1
	}
	name := flagName(args[0])
	for _, f := range flags {
		if !flagNamed(f, name) {
			continue
		}
		if v, ok := f.(interface{ TakesValue() bool }); ok && v.TakesValue() {
			return 2
		}
		return 1
	}
	return 1
}
