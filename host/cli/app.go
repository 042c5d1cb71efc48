package cli

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"berth.dev/berth/version"
)

// Main runs the berth command line with args (os.Args) and returns the exit code.
func Main(args []string) int {
	return runWithInput(args, os.Stdin, os.Stdout, os.Stderr)
}

func run(args []string, stdout, stderr io.Writer) int {
	return runWithInput(args, os.Stdin, stdout, stderr)
}

// runWithInput runs the command line with stdin for the commands that ask
// (node drain's confirmation).
func runWithInput(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	app.Reader = stdin
	if err := app.Run(args); err != nil {
		var se silentExit
		if !errors.As(err, &se) {
			fmt.Fprintf(stderr, "Error: %v\n", err)
		}
		var ec cli.ExitCoder
		if errors.As(err, &ec) && ec.ExitCode() != 0 {
			return ec.ExitCode()
		}
		return 1
	}
	return 0
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

// newApp builds the command tree. Global flags (Flags here) are inherited
// by every command that declares a flag of the same name; flagString
// resolves which one the user meant.
func newApp(stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:                 "berth",
		Usage:                "a cluster runtime where storage simply works",
		Version:              version.Version,
		Writer:               stdout,
		ErrWriter:            stderr,
		EnableBashCompletion: true,
		HideVersion:          true,
		Flags:                globalFlags(),
		Commands: []*cli.Command{
			runCommand(),
			versionCommand(),
			serverCommand(),
			jobCommand(),
			allocCommand(),
			evalCommand(),
			nodeCommand(),
			pluginCommand(),
			volumeCommand(),
			systemCommand(),
			operatorCommand(),
			builtinCommand(),
		},
		// Errors are printed once, here, rather than by urfave's handler.
		ExitErrHandler: func(*cli.Context, error) {},
	}
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
