package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"berth.dev/berth/internal/version"
)

// Main runs the berth command line with args (os.Args) and returns the exit code.
func Main(args []string) int {
	return runWithInput(args, os.Stdin, os.Stdout, os.Stderr)
}

func run(args []string, stdout, stderr io.Writer) int {
	return runWithInput(args, os.Stdin, stdout, stderr)
}

// Exit codes: one scheme for every command (README "Exit codes"). `job
// plan` answers with its own codes (job_plan.go), as Nomad's does.
const (
	// exitOK: the command did what it was asked.
	exitOK = 0
	// exitError: it could not (the agent refused or could not be reached,
	// a file is invalid, ...); the error is on stderr.
	exitError = 1
	// exitUsage: the command line is wrong (an unknown command or flag, a
	// flag's value, the number of arguments); nothing was sent.
	exitUsage = 2
	// exitPlacementFailed: a command that follows its write's evaluation
	// (job run, revert and stop, alloc stop) wrote what it was asked to,
	// but the evaluation failed or could not place every alloc, or an
	// alloc failed; the output says why. Told apart from exitError because
	// the write happened: running the command again submits it again.
	// volume detach exits with it too when the node detached the volume
	// but its claims were not freed within -timeout.
	exitPlacementFailed = 3
)

// runWithInput runs the command line with stdin for the commands that ask
// (node drain's confirmation).
func runWithInput(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runApp(newAppFor(stdout, stderr, args), args, stdin, stderr)
}

// runApp runs the command line on app, whose writers are stdout and stderr.
func runApp(app *cli.App, args []string, stdin io.Reader, stderr io.Writer) int {
	app.Reader = stdin
	// urfave/cli reports an unknown command through this hook (from its
	// help command) and then returns no error: the error is kept here.
	var unknown error
	app.CommandNotFound = func(c *cli.Context, name string) { unknown = unknownCommand(c, name) }
	err := app.Run(flagsFirst(app, args))
	if err == nil {
		err = unknown
	}
	if err == nil {
		return exitOK
	}
	var se silentExit
	if !errors.As(err, &se) {
		fmt.Fprintf(stderr, "Error: %v\n", err)
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) && ec.ExitCode() != 0 {
		return ec.ExitCode()
	}
	return exitError
}

// silentExit ends a command with an exit code and no "Error:" line: the
// command has already said why (a failed placement, a plan with changes).
type silentExit int

func (e silentExit) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// ExitCode makes silentExit a cli.ExitCoder.
func (e silentExit) ExitCode() int { return int(e) }

// exitWith wraps err so the command exits with code instead of 1 (job plan
// exits 255 on errors, as Nomad's does).
func exitWith(code int, err error) error {
	if err == nil {
		return nil
	}
	return cli.Exit(err, code)
}

// cmdLineError is a command line the command cannot run (usageError); it
// exits with exitUsage.
type cmdLineError struct{ msg string }

func (e *cmdLineError) Error() string { return e.msg }

// ExitCode makes cmdLineError a cli.ExitCoder.
func (e *cmdLineError) ExitCode() int { return exitUsage }

// unknownCommand is the usage error for a command name c's command does
// not have, naming the ones it has.
func unknownCommand(c *cli.Context, name string) error {
	var names []string
	for _, cmd := range c.Command.Subcommands {
		if !cmd.Hidden && cmd.Name != "help" {
			names = append(names, cmd.Name)
		}
	}
	return &cmdLineError{fmt.Sprintf("%s has no command %q; its commands: %s", commandPath(c), name, strings.Join(names, ", "))}
}

// flagUsageError turns urfave/cli's refusal of a flag (unknown, missing
// its value, a value that does not parse) into a usage error, printed
// once by runWithInput instead of with the whole help text.
//
// A token after an argument that names no flag of the command may have
// been meant as an argument (a task or job name may start with '-'):
// since flags may follow the arguments, such an argument must come after
// "--", and the error says so.
func flagUsageError(c *cli.Context, err error, _ bool) error {
	if unknown, _ := c.App.Metadata[unknownFlagsKey].([]string); len(unknown) > 0 {
		return usageError(c, "%v (an argument starting with '-', such as a task or job name, goes after \"--\": %s ARGS -- %s)",
			err, commandPath(c), unknown[0])
	}
	return usageError(c, "%v", err)
}

// onUsageErrors sets flagUsageError on every command of the tree.
func onUsageErrors(cmds []*cli.Command) {
	for _, cmd := range cmds {
		cmd.OnUsageError = flagUsageError
		onUsageErrors(cmd.Subcommands)
	}
}

// newApp builds the whole command tree. Global flags (Flags here) are
// inherited by every command that declares a flag of the same name;
// flagString resolves which one the user meant.
func newApp(stdout, stderr io.Writer) *cli.App { return newAppFor(stdout, stderr, nil) }

// topCommands are the top-level commands in the order help lists them.
var topCommands = []struct {
	name  string
	build func() *cli.Command
}{
	{"run", runCommand},
	{"version", versionCommand},
	{"server", serverCommand},
	{"job", jobCommand},
	{"alloc", allocCommand},
	{"eval", evalCommand},
	{"node", nodeCommand},
	{"plugin", pluginCommand},
	{"volume", volumeCommand},
	{"system", systemCommand},
	{"operator", operatorCommand},
	{"builtin", builtinCommand},
	{"tls", tlsCommand},
	{"acl", aclCommand},
}

// newAppFor builds the command tree args need: when args name a top-level
// command, only that command's subtree (its help, its subcommands'
// suggestions and its completions need no other), else every command (the
// top-level help, an unknown command's suggestions). Building all of them
// cost every command line ~0.15 ms of its start (issue 26).
func newAppFor(stdout, stderr io.Writer, args []string) *cli.App {
	app := &cli.App{
		Name:                 "berth",
		Usage:                "a cluster runtime where storage simply works",
		Version:              version.Version,
		Writer:               stdout,
		ErrWriter:            stderr,
		EnableBashCompletion: true,
		HideVersion:          true,
		Flags:                globalFlags(),
		Commands:             commandsFor(args),
		// Compiled is shown by no template berth uses; left zero, urfave/cli
		// stats the binary on every run to fill it in.
		Compiled: compiledUnset,
		// Errors are printed once, here, rather than by urfave's handler.
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError:   flagUsageError,
	}
	addTLSFlags(app.Commands)
	onUsageErrors(app.Commands)
	withTokenFlag(app.Commands)
	return app
}

// compiledUnset stands for the build time, which berth does not record.
var compiledUnset = time.Unix(0, 0).UTC()

// commandsFor builds the top-level command args name (after the global
// flags), or all of them when they name none.
func commandsFor(args []string) []*cli.Command {
	if name := commandName(args); name != "" {
		for _, c := range topCommands {
			if c.name == name {
				return []*cli.Command{c.build()}
			}
		}
	}
	cmds := make([]*cli.Command, len(topCommands))
	for i, c := range topCommands {
		cmds[i] = c.build()
	}
	return cmds
}

// commandName is the first argument after the global flags ("" when there
// is none, or after "--").
func commandName(args []string) string {
	flags := globalFlags()
	for i := 1; i < len(args); {
		a := args[i]
		if !isFlag(a) {
			return a
		}
		if a == "--" {
			return ""
		}
		i += flagTokens(flags, args[i:])
	}
	return ""
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print berth's version",
		Action: func(c *cli.Context) error {
			_, err := fmt.Fprintf(c.App.Writer, "berth v%s\n", version.Version)
			return err
		},
	}
}
