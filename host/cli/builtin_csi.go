package cli

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// builtinCSIHostpathCommand is replaced by the hostpath plugin's real entry point.
func builtinCSIHostpathCommand() *cli.Command {
	return &cli.Command{Name: "csi-hostpath", Action: func(*cli.Context) error { return errors.New("not built yet") }}
}
