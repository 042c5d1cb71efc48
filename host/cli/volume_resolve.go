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
// dynamic host volumes (typ "" for both). Both lookups are made first: an
// exact ID of either kind wins (over a prefix of the other kind, even one
// matching several); a failed lookup counts only when neither is exact;
// a prefix that matches volumes of both kinds is refused, naming both.
func resolveVolume(c *cli.Context, client *api.Client, arg, typ string) (kind, id string, err error) {
	var hostID, csiID string
	var hostErr, csiErr error
	if typ == "" || typ == kindHost {
		hostID, hostErr = hostVolumeOf(c, client, arg)
	}
	if typ == "" || typ == kindCSI {
		csiID, csiErr = findVolume(c, client, arg)
		var none *noMatchError
		if errors.As(csiErr, &none) || typ == "" && errcode.Code(csiErr) == codes.NotFound {
			csiID, csiErr = "", nil
		}
	}
	csiExact := csiErr == nil && csiID == arg
	hostExact := hostErr == nil && hostID == arg
	switch {
	case csiExact && !hostExact:
		return kindCSI, csiID, nil
	case hostExact && !csiExact:
		return kindHost, hostID, nil
	case hostErr != nil:
		return "", "", hostErr
	case csiErr != nil:
		return "", "", csiErr
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
