package cli

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/apijson"
)

func globalFlags() []cli.Flag {
	return []cli.Flag{addressFlag()}
}

func addressFlag() cli.Flag {
	return &cli.StringFlag{
		Name:    "address",
		Usage:   "HTTP address of a berth agent",
		EnvVars: []string{api.EnvAddress},
		Value:   "http://127.0.0.1:7646",
	}
}

var jsonFlag = &cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"}

// readFlags are the flags of every command that reads from the API.
func readFlags(extra ...cli.Flag) []cli.Flag {
	return append([]cli.Flag{addressFlag(), jsonFlag}, extra...)
}

func apiClient(c *cli.Context) (*api.Client, error) {
	return api.NewClient(c.String("address"))
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

// usageError is returned for wrong arguments; it prints with the usage hint.
func usageError(c *cli.Context, format string, args ...any) error {
	return fmt.Errorf("%s\nUsage: berth %s %s", fmt.Sprintf(format, args...), c.Command.FullName(), c.Command.ArgsUsage)
}

// enumWord is an enum value as the API's JSON spells it ("ready"), or its
// number when this version does not know it.
func enumWord(e protoreflect.Enum) string {
	if w, ok := apijson.EnumWord(e.Descriptor(), e.Number()); ok {
		return w
	}
	return fmt.Sprint(int32(e.Number()))
}
