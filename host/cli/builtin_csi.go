package cli

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"berth.dev/berth/builtin/csi/hostpath"
)

// builtinCSIHostpathCommand runs the built-in hostpath CSI plugin until
// SIGINT or SIGTERM.
func builtinCSIHostpathCommand() *cli.Command {
	return &cli.Command{
		Name:  "csi-hostpath",
		Usage: "run the built-in hostpath CSI plugin (" + hostpath.PluginName + ")",
		Description: "Serves CSI volumes that are directories (or loop-device block images) under --state-dir.\n" +
			"Run one process in monolith mode, or one controller and any number of node processes that\n" +
			"share the state directory. A restarted plugin keeps its volumes, snapshots and attachments.\n\n" +
			"For tests and fault drills only: --delay Method=duration holds every call of that CSI method\n" +
			"before it runs, --delay-after after it ran (the work done, the reply held), so that \"the agent\n" +
			"died while NodeStageVolume was in flight\" can be reached on purpose. With --delay-marker-dir\n" +
			"each held call creates a file <method>.<before|after>.<volume>.<node>.<pid>.<n> there as its\n" +
			"hold starts: wait for it, then inject the fault.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "endpoint", Usage: "CSI endpoint: unix:///path/csi.sock or a socket path", EnvVars: []string{"CSI_ENDPOINT"}},
			&cli.StringFlag{Name: "node-id", Usage: "this node's ID (required in monolith and node mode)"},
			&cli.StringFlag{Name: "state-dir", Usage: "directory holding volumes, snapshots and plugin state"},
			&cli.StringFlag{Name: "capacity", Usage: "capacity to hand out over all volumes and snapshots, e.g. 10GiB, 500MiB, 1G; 0 = no such limit (each volume must still fit the filesystem's free space)", Value: "0"},
			&cli.StringFlag{Name: "max-volume-size", Usage: "largest volume to create or expand to, e.g. 100GiB", Value: "1TiB"},
			&cli.StringFlag{Name: "mode", Usage: "services to serve: monolith, controller or node", Value: hostpath.ModeMonolith},
			&cli.Int64Flag{Name: "max-volumes", Usage: "volumes that may be attached to this node; 0 = unlimited"},
			&cli.StringSliceFlag{Name: "topology", Usage: "topology segment key=value of this node (repeatable, or comma-separated)"},
			&cli.BoolFlag{Name: "no-publish", Usage: "serve no ControllerPublishVolume/ControllerUnpublishVolume and do not advertise PUBLISH_UNPUBLISH_VOLUME (as kubernetes-csi hostpath without --enable-attach)"},
			&cli.StringFlag{Name: "log-level", Usage: "trace, debug, info, warn or error", Value: "info"},
			&cli.BoolFlag{Name: "log-json", Usage: "log in JSON"},
			&cli.StringSliceFlag{Name: "delay", Usage: "for tests and fault drills: hold each call of a CSI method before it runs, `Method=duration` (e.g. NodeStageVolume=3s; repeatable)"},
			&cli.StringSliceFlag{Name: "delay-after", Usage: "for tests and fault drills: hold each reply of a CSI method after the call ran, `Method=duration` (repeatable)"},
			&cli.StringFlag{Name: "delay-marker-dir", Usage: "for tests and fault drills: each held call creates a marker file in this `DIR` as its hold starts"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageError(c, "csi-hostpath takes no arguments, got %q", c.Args().Slice())
			}
			// Checked here rather than with urfave's Required, whose error
			// is not a usage error.
			for _, name := range []string{"endpoint", "state-dir"} {
				if c.String(name) == "" {
					return usageError(c, "--%s is required", name)
				}
			}
			capacity, err := hostpath.ParseCapacity(c.String("capacity"))
			if err != nil {
				return usageError(c, "--capacity: %v", err)
			}
			maxVolumeSize, err := hostpath.ParseCapacity(c.String("max-volume-size"))
			if err != nil {
				return usageError(c, "--max-volume-size: %v", err)
			}
			if maxVolumeSize == 0 {
				return usageError(c, "--max-volume-size: must be more than 0 bytes")
			}
			topology, err := hostpath.ParseTopology(c.StringSlice("topology"))
			if err != nil {
				return usageError(c, "--topology: %v", err)
			}
			delayBefore, err := hostpath.ParseDelays(c.StringSlice("delay"))
			if err != nil {
				return usageError(c, "--delay: %v", err)
			}
			delayAfter, err := hostpath.ParseDelays(c.StringSlice("delay-after"))
			if err != nil {
				return usageError(c, "--delay-after: %v", err)
			}
			level := hclog.LevelFromString(c.String("log-level"))
			if level == hclog.NoLevel {
				return usageError(c, "--log-level %q: want trace, debug, info, warn or error", c.String("log-level"))
			}
			logger := hclog.New(&hclog.LoggerOptions{
				Name:       "berth",
				Level:      level,
				Output:     c.App.ErrWriter,
				JSONFormat: c.Bool("log-json"),
			})
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			return hostpath.Run(ctx, hostpath.Config{
				Endpoint:   c.String("endpoint"),
				NodeID:     c.String("node-id"),
				StateDir:   c.String("state-dir"),
				Capacity:   capacity,
				Mode:       c.String("mode"),
				MaxVolumes: c.Int64("max-volumes"),
				Topology:   topology,
				Logger:     logger,
				NoPublish:  c.Bool("no-publish"),

				MaxVolumeSize: maxVolumeSize,

				DelayBefore:    delayBefore,
				DelayAfter:     delayAfter,
				DelayMarkerDir: c.String("delay-marker-dir"),
			})
		},
	}
}
