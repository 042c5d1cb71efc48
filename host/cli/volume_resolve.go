package cli

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"
	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/errcode"
)

// The kinds of volume an ID or prefix may name.
const (
	kindCSI  = "csi"
	kindHost = "host"
)

// resolveVolume finds what volume arg names among the CSI volumes and the
// dynamic host volumes (typ "" for both): an exact ID wins over a prefix;
// a prefix that matches volumes of both kinds is refused, naming both
// (a CSI volume "db" is not shadowed by a host volume ID "db…").
func resolveVolume(c *cli.Context, client *api.Client, arg, typ string) (kind, id string, err error) {
	var hostID, csiID string
	if typ == "" || typ == kindHost {
		if hostID, err = hostVolumeOf(c, client, arg); err != nil {
			return "", "", err
		}
	}
	if typ == "" || typ == kindCSI {
		csiID, err = findVolume(c, client, arg)
		var none *noMatchError
		switch {
		case errors.As(err, &none), typ == "" && errcode.Code(err) == codes.NotFound:
			csiID = ""
		case err != nil:
			return "", "", err
		}
	}
	switch {
	case csiID == arg && hostID != arg:
		return kindCSI, csiID, nil
	case hostID == arg && csiID != arg:
		return kindHost, hostID, nil
	case csiID != "" && hostID != "":
		return "", "", fmt.Errorf("%q names CSI volume %q and dynamic host volume %s: give the whole ID, or -type", arg, csiID, hostID)
	case hostID != "":
		return kindHost, hostID, nil
	case csiID != "":
		return kindCSI, csiID, nil
	case typ == kindHost:
		return "", "", &noMatchError{"host volume", arg}
	}
	return "", "", &noMatchError{"volume", arg}
}
