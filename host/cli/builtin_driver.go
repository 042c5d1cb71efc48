package cli

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// builtinDriverCommand is replaced by the driver plugin entry point.
func builtinDriverCommand() *cli.Command {
	return &cli.Command{Name: "driver", Action: func(*cli.Context) error { return errors.New("not built yet") }}
}
