package cli

import "github.com/urfave/cli/v2"

// volumeCommand is the volume command group. The volume API's commands
// (register, status, ...) are built on another branch; at merge this file
// goes and volumeClaimCommands() joins that group's subcommands.
func volumeCommand() *cli.Command {
	return &cli.Command{
		Name:        "volume",
		Usage:       "claim and release CSI volumes",
		Subcommands: volumeClaimCommands(),
	}
}
