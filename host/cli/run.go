package cli

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/urfave/cli/v2"

	"berth.dev/berth/host/agent"
)

func runCommand() *cli.Command {
	return &cli.Command{
		Name:  "run",
		Usage: "run a berth agent (server, client, or both)",
		Description: "Starts an agent from -config files (HCL or JSON; repeatable, merged in order) or,\n" +
			"with -dev, a single-process server+client on 127.0.0.1 with data in a temporary directory.\n" +
			"SIGINT/SIGTERM shut down gracefully; a second signal forces exit.\n" +
			"SIGHUP reloads the TLS certificates and CA (tls block); open connections keep theirs.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "dev", Usage: "run a dev agent: server and client on 127.0.0.1, temporary data"},
			&cli.StringSliceFlag{Name: "config", Usage: "config file or directory (repeatable)"},
			&cli.StringFlag{Name: "plugin-dir", Usage: "directory of third-party plugins (overrides plugin_dir)"},
			&cli.StringFlag{Name: "data-dir", Usage: "data directory (overrides data_dir)"},
		},
		Action: runAgent,
	}
}

func runAgent(c *cli.Context) error {
	if c.NArg() > 0 {
		return usageError(c, "run takes no arguments, got %q", c.Args().Slice())
	}
	cfg, err := loadAgentConfig(c)
	if err != nil {
		return err
	}
	logger := agent.NewLogger(cfg, c.App.ErrWriter)

	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(signals)
	// SIGHUP reloads what can change under a running agent (run_reload.go).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	a, err := agent.New(cfg, logger)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "berth agent running: HTTP API at %s (data in %s)\n", a.HTTPURL(), a.DataDir())

	sig := waitSignal(a, signals, hup)
	logger.Info("shutting down; signal again to force exit", "signal", sig.String())
	done := make(chan struct{})
	go func() {
		a.Shutdown()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case sig := <-signals:
		return cli.Exit(fmt.Sprintf("forced exit on second signal (%s)", sig), 1)
	}
}

func loadAgentConfig(c *cli.Context) (*agent.Config, error) {
	paths := c.StringSlice("config")
	if !c.Bool("dev") && len(paths) == 0 {
		return nil, usageError(c, "berth run needs -dev or at least one -config file")
	}
	cfg := agent.DefaultConfig()
	if c.Bool("dev") {
		cfg = agent.DevConfig()
	}
	if len(paths) > 0 {
		fromFiles, err := agent.LoadConfigFiles(paths)
		if err != nil {
			return nil, err
		}
		cfg = cfg.Merge(fromFiles)
		cfg.DevMode = c.Bool("dev")
	}
	// Flags are relative to the working directory; config paths must be absolute.
	for flag, dst := range map[string]*string{"plugin-dir": &cfg.PluginDir, "data-dir": &cfg.DataDir} {
		if d := c.String(flag); d != "" {
			abs, err := filepath.Abs(d)
			if err != nil {
				return nil, fmt.Errorf("-%s %q: %w", flag, d, err)
			}
			*dst = abs
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}
