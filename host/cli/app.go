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
	return run(args, os.Stdout, os.Stderr)
}

func run(args []string, stdout, stderr io.Writer) int {
	if err := newApp(stdout, stderr).Run(args); err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		var ec cli.ExitCoder
		if errors.As(err, &ec) && ec.ExitCode() != 0 {
			return ec.ExitCode()
		}
		return 1
	}
	return 0
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
			nodeCommand(),
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
