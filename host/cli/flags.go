package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"github.com/urfave/cli/v2"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/api"
)

func globalFlags() []cli.Flag {
	return []cli.Flag{addressFlag()}
}

// addressFlag is declared both globally (`berth -address X node status`) and
// on every API command (`berth node status -address X`). It has no EnvVars
// and no Value on purpose: urfave/cli marks a flag read from the environment
// as set and gives an unset flag its default, and either would let the
// command-level flag shadow the global one. apiClient applies the order
// command flag > global flag > BERTH_ADDR > default itself.
func addressFlag() cli.Flag {
	return &cli.StringFlag{
		Name:        "address",
		Usage:       "HTTP address of a berth agent",
		DefaultText: "$" + api.EnvAddress + ", else http://127.0.0.1:7646",
	}
}

var jsonFlag = &cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"}

// readFlags are the flags of every command that reads from the API.
func readFlags(extra ...cli.Flag) []cli.Flag {
	return append([]cli.Flag{addressFlag(), jsonFlag}, extra...)
}

func apiClient(c *cli.Context) (*api.Client, error) {
	addr, ok := flagString(c, "address")
	if !ok {
		addr = api.DefaultAddress()
	}
	return api.NewClient(addr)
}

// flagString returns the value of the string flag name from the innermost
// command that was given it on the command line, so a flag given to the
// command itself beats the same flag given globally (or to a parent
// command). ok is false when no level was given it.
func flagString(c *cli.Context, name string) (value string, ok bool) {
	for _, ctx := range c.Lineage() {
		// The outermost context only carries the Go context and has no flags.
		if ctx.Command == nil {
			continue
		}
		if slices.Contains(ctx.LocalFlagNames(), name) {
			return ctx.String(name), true
		}
	}
	return "", false
}

var protoOut = protojson.MarshalOptions{UseProtoNames: true, Multiline: true, Indent: "  "}

// printJSON prints a message, a slice of messages, or a plain JSON value.
func printJSON(w io.Writer, v any) error {
	switch m := v.(type) {
	case proto.Message:
		b, err := protoOut.Marshal(m)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(w, string(b))
		return err
	case []proto.Message:
		raw := make([]json.RawMessage, 0, len(m))
		for _, x := range m {
			b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(x)
			if err != nil {
				return err
			}
			raw = append(raw, b)
		}
		v = raw
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

// messages converts a typed slice for printJSON.
func messages[M proto.Message](ms []M) []proto.Message {
	out := make([]proto.Message, len(ms))
	for i, m := range ms {
		out[i] = m
	}
	return out
}

// usageError is returned for wrong arguments; it prints with the usage hint.
func usageError(c *cli.Context, format string, args ...any) error {
	return fmt.Errorf("%s\nUsage: berth %s %s", fmt.Sprintf(format, args...), c.Command.FullName(), c.Command.ArgsUsage)
}
