package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/apijson"
)

func globalFlags() []cli.Flag {
	return append([]cli.Flag{addressFlag(), tokenFlag()}, tlsFlags()...)
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
	client, err := api.NewClientTLS(addr, apiTLS(c))
	if err != nil {
		return nil, err
	}
	if tok, ok := flagString(c, "token"); ok {
		client.SetToken(tok)
	}
	return client, nil
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

// listPerPage is the page size the CLI asks for when it reads a whole list:
// the agent's maximum, so 10,000 nodes take ten requests.
const listPerPage = 1000

// printJSON prints a message in the API's JSON (rpc/apijson), byte for byte
// what the agent sends, or a plain Go value as indented JSON.
func printJSON(w io.Writer, v any) error {
	var b []byte
	var err error
	if m, ok := v.(proto.Message); ok {
		b, err = apijson.Marshal(m)
	} else {
		b, err = json.MarshalIndent(v, "", "  ")
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

// printJSONList prints messages as one JSON array, as a list endpoint
// renders a page.
func printJSONList[M proto.Message](w io.Writer, ms []M) error {
	b, err := apijson.MarshalList(ms)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

// usageError is returned for a command line the command cannot run
// (arguments, flags); it prints with the usage hint and exits with
// exitUsage.
func usageError(c *cli.Context, format string, args ...any) error {
	usage := strings.TrimSpace(commandPath(c) + " " + c.Command.ArgsUsage)
	return &cmdLineError{fmt.Sprintf("%s\nUsage: %s", fmt.Sprintf(format, args...), usage)}
}

// commandPath is the command as typed ("berth job run", the root
// command's name included): urfave's FullName leaves out the parents of a
// subcommand.
func commandPath(c *cli.Context) string {
	var names []string
	for _, ctx := range c.Lineage() {
		if ctx.Command != nil && ctx.Command.Name != "" {
			names = append(names, ctx.Command.Name)
		}
	}
	slices.Reverse(names)
	return strings.Join(names, " ")
}
