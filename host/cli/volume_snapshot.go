package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"berth.dev/berth/internal/units"
	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
)

// kvList is a repeatable key=value flag. It is not a StringSliceFlag,
// which would split a secret's value at its commas.
type kvList struct {
	m map[string]string
	n int
	// bad is the first malformed entry's number. Set does not fail on it:
	// urfave would print the value it was given, which may be a secret;
	// kvFrom reports it by number.
	bad int
}

func (l *kvList) Set(s string) error {
	l.n++
	k, v, ok := strings.Cut(s, "=")
	if !ok || strings.TrimSpace(k) == "" {
		if l.bad == 0 {
			l.bad = l.n
		}
		return nil
	}
	if l.m == nil {
		l.m = map[string]string{}
	}
	l.m[strings.TrimSpace(k)] = v
	return nil
}

// String names the keys only: urfave prints a flag's value in help and
// errors, and these may be secrets.
func (l *kvList) String() string {
	return strings.Join(sortedKeys(l.m), ",")
}

func secretFlag() cli.Flag {
	return &cli.GenericFlag{Name: "secret", Value: &kvList{}, Usage: "CSI secret key=value sent to the plugin (repeatable); replaces the volume's stored secrets"}
}

// kvFrom reads a kvList flag (-secret, -parameter); nil when not given.
// A malformed entry is named by its place, never by its text.
func kvFrom(c *cli.Context, name string) (map[string]string, error) {
	l, ok := c.Generic(name).(*kvList)
	if !ok {
		return nil, nil
	}
	if l.bad > 0 {
		return nil, usageError(c, "-%s number %d is not key=value with a non-empty key", name, l.bad)
	}
	return l.m, nil
}

func volumeSnapshotCommand() *cli.Command {
	return &cli.Command{
		Name:  "snapshot",
		Usage: "create, list and delete CSI snapshots of volumes",
		Subcommands: []*cli.Command{
			{
				Name:      "create",
				Usage:     "snapshot a volume with its plugin",
				ArgsUsage: "VOLUME [NAME]",
				Flags: []cli.Flag{addressFlag(), jsonFlag, secretFlag(),
					&cli.GenericFlag{Name: "parameter", Value: &kvList{}, Usage: "plugin parameter key=value (repeatable)"}},
				Action: snapshotCreate,
			},
			{
				Name:      "list",
				Usage:     "list a plugin's snapshots, every page",
				ArgsUsage: " ",
				Flags: readFlags(secretFlag(),
					&cli.StringFlag{Name: "plugin", Usage: "the CSI plugin whose snapshots to list"},
					&cli.StringFlag{Name: "volume", Usage: "only the snapshots of this volume (its plugin is asked)"}),
				Action: snapshotList,
			},
			{
				Name:      "delete",
				Usage:     "delete a snapshot with its plugin",
				ArgsUsage: "PLUGIN SNAPSHOT",
				Flags:     []cli.Flag{addressFlag(), secretFlag()},
				Action:    snapshotDelete,
			},
		},
	}
}

func snapshotCreate(c *cli.Context) error {
	if c.NArg() < 1 || c.NArg() > 2 {
		return usageError(c, "snapshot create takes a volume ID and, optionally, a snapshot name")
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	id, err := findVolume(c, client, c.Args().First())
	if err != nil {
		return err
	}
	req := &pb.SnapshotCreateRequest{VolumeId: id, Name: c.Args().Get(1)}
	if req.Parameters, err = kvFrom(c, "parameter"); err != nil {
		return err
	}
	if req.Secrets, err = kvFrom(c, "secret"); err != nil {
		return err
	}
	snap, err := client.Volumes().CreateSnapshot(c.Context, req)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, snap)
	}
	return printSnapshots(c.App.Writer, []*pb.Snapshot{snap})
}

func snapshotList(c *cli.Context) error {
	if c.NArg() != 0 {
		return usageError(c, "snapshot list takes no arguments; name the plugin with -plugin or the volume with -volume")
	}
	plugin := c.String("plugin")
	if plugin == "" && c.String("volume") == "" {
		return usageError(c, "snapshot list needs -plugin or -volume")
	}
	of := fmt.Sprintf("plugin %q", plugin)
	if plugin == "" {
		of = fmt.Sprintf("volume %q", c.String("volume"))
	}
	secrets, err := kvFrom(c, "secret")
	if err != nil {
		return err
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	q := &api.QueryOptions{}
	if v := c.String("volume"); v != "" {
		q.Params = map[string]string{"volume_id": v}
	}
	// The plugin's page tokens are opaque (api.Pages wants them sorted):
	// follow them by hand, stopping at one seen before so a plugin that
	// hands back an old token cannot keep the loop going.
	var all []*pb.Snapshot
	seen := map[string]bool{}
	for {
		snaps, meta, err := client.Volumes().Snapshots(c.Context, plugin, secrets, q)
		if err != nil {
			return err
		}
		all = append(all, snaps...)
		if meta.NextToken == "" {
			break
		}
		if seen[meta.NextToken] {
			return fmt.Errorf("%s: its snapshot list handed back page token %q twice; stopped after %d snapshots", of, meta.NextToken, len(all))
		}
		seen[meta.NextToken] = true
		q.NextToken = meta.NextToken
	}
	if c.Bool("json") {
		return printJSONList(c.App.Writer, all)
	}
	if len(all) == 0 {
		_, err := fmt.Fprintf(c.App.Writer, "No snapshots of %s\n", of)
		return err
	}
	return printSnapshots(c.App.Writer, all)
}

func snapshotDelete(c *cli.Context) error {
	if c.NArg() != 2 {
		return usageError(c, "snapshot delete takes a plugin ID and a snapshot ID")
	}
	secrets, err := kvFrom(c, "secret")
	if err != nil {
		return err
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	plugin, snap := c.Args().Get(0), c.Args().Get(1)
	if err := client.Volumes().DeleteSnapshot(c.Context, plugin, snap, secrets); err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.App.Writer, "Deleted snapshot %q of plugin %q\n", snap, plugin)
	return err
}

func printSnapshots(w io.Writer, snaps []*pb.Snapshot) error {
	tw := newTable(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "Snapshot ID\tVolume ID\tExternal Volume ID\tSize\tCreated\tReady")
	for _, s := range snaps {
		size := "-"
		if s.GetSizeBytes() > 0 {
			size = units.Bytes(uint64(s.GetSizeBytes()))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%t\n", s.GetId(), orDash(s.GetVolumeId()), orDash(s.GetExternalSourceVolumeId()),
			size, formatNanos(s.GetCreatedAt()), s.GetReadyToUse())
	}
	return tw.Flush()
}
