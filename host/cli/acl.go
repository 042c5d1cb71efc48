package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"berth.dev/berth/internal/acl"
	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
)

// tokenFlag is the ACL token a command sends, like addressFlag declared
// globally and on every API command (withTokenFlag); without it the client
// sends BERTH_TOKEN's.
func tokenFlag() cli.Flag {
	return &cli.StringFlag{
		Name:        "token",
		Usage:       "ACL token (secret ID) to send",
		DefaultText: "$" + api.EnvToken,
	}
}

// withTokenFlag gives -token to every command that takes -address: every
// command that calls the API.
func withTokenFlag(cmds []*cli.Command) {
	for _, cmd := range cmds {
		if hasFlag(cmd.Flags, "address") && !hasFlag(cmd.Flags, "token") {
			cmd.Flags = append(cmd.Flags, tokenFlag())
		}
		withTokenFlag(cmd.Subcommands)
	}
}

func aclCommand() *cli.Command {
	policyFlag := &cli.StringSliceFlag{Name: "policy", Usage: "a policy of the token (repeat for several)"}
	nameFlag := &cli.StringFlag{Name: "name", Usage: "a name for the token"}
	return &cli.Command{
		Name:  "acl",
		Usage: "ACL bootstrap, policies and tokens",
		Subcommands: []*cli.Command{
			{
				Name:   "bootstrap",
				Usage:  "create the cluster's first management token (once)",
				Flags:  []cli.Flag{addressFlag(), jsonFlag},
				Action: aclBootstrap,
			},
			{
				Name:  "policy",
				Usage: "manage ACL policies",
				Subcommands: []*cli.Command{
					{Name: "apply", Usage: "create or replace a policy from an HCL file", ArgsUsage: "NAME FILE",
						Flags:  []cli.Flag{addressFlag(), &cli.StringFlag{Name: "description", Usage: "what the policy is for"}},
						Action: aclPolicyApply},
					{Name: "list", Usage: "list policies", Flags: readFlags(), Action: aclPolicyList},
					{Name: "info", Usage: "show a policy and its rules", ArgsUsage: "NAME", Flags: readFlags(), Action: aclPolicyInfo},
					{Name: "delete", Usage: "delete a policy", ArgsUsage: "NAME", Flags: []cli.Flag{addressFlag()}, Action: aclPolicyDelete},
				},
			},
			{
				Name:  "token",
				Usage: "manage ACL tokens",
				Subcommands: []*cli.Command{
					{Name: "create", Usage: "create a token; its secret is shown this once",
						Flags: []cli.Flag{addressFlag(), jsonFlag, nameFlag, policyFlag,
							&cli.StringFlag{Name: "type", Value: "client", Usage: "client (its policies decide) or management (everything)"},
							&cli.DurationFlag{Name: "ttl", Usage: "make the token expire this long after its creation"}},
						Action: aclTokenCreate},
					{Name: "list", Usage: "list tokens", Flags: readFlags(), Action: aclTokenList},
					{Name: "info", Usage: "show a token", ArgsUsage: "ACCESSOR", Flags: readFlags(), Action: aclTokenInfo},
					{Name: "update", Usage: "change a token's name and policies", ArgsUsage: "ACCESSOR",
						Flags: []cli.Flag{addressFlag(), jsonFlag, nameFlag, policyFlag}, Action: aclTokenUpdate},
					{Name: "delete", Usage: "delete a token", ArgsUsage: "ACCESSOR", Flags: []cli.Flag{addressFlag()}, Action: aclTokenDelete},
					{Name: "self", Usage: "show the token this command sends", Flags: readFlags(), Action: aclTokenSelf},
				},
			},
		},
	}
}

func aclBootstrap(c *cli.Context) error {
	if c.NArg() != 0 {
		return usageError(c, "acl bootstrap takes no arguments")
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	resp, err := client.ACL().Bootstrap(c.Context)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, resp)
	}
	return printToken(c.App.Writer, resp.GetToken(), resp.GetSecretId())
}

func aclPolicyApply(c *cli.Context) error {
	if c.NArg() != 2 {
		return usageError(c, "acl policy apply takes a policy name and a file")
	}
	name, file := c.Args().Get(0), c.Args().Get(1)
	if err := acl.ValidName(name); err != nil {
		return usageError(c, "%v", err)
	}
	src, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("policy file: %w", err)
	}
	// Parsed here too, so problems name the file as the user knows it.
	if _, err := acl.Parse(file, src); err != nil {
		return err
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	if _, err := client.ACL().PolicyApply(c.Context, name, c.String("description"), string(src)); err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.App.Writer, "Policy %q applied\n", name)
	return err
}

func aclPolicyList(c *cli.Context) error {
	if c.NArg() != 0 {
		return usageError(c, "acl policy list takes no arguments")
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	ps, _, err := api.AllPages(c.Context, &api.QueryOptions{PerPage: listPerPage}, client.ACL().Policies)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSONList(c.App.Writer, ps)
	}
	if len(ps) == 0 {
		_, err := fmt.Fprintln(c.App.Writer, "No policies")
		return err
	}
	tw := newTable(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "Name\tDescription")
	for _, p := range ps {
		fmt.Fprintf(tw, "%s\t%s\n", p.GetName(), p.GetDescription())
	}
	return tw.Flush()
}

func aclPolicyInfo(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageError(c, "acl policy info takes a policy name")
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	p, _, err := client.ACL().Policy(c.Context, c.Args().First(), nil)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, p)
	}
	_, err = fmt.Fprintf(c.App.Writer, "Name        = %s\nDescription = %s\nRules\n\n%s\n", p.GetName(), p.GetDescription(), strings.TrimRight(p.GetRules(), "\n"))
	return err
}

func aclPolicyDelete(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageError(c, "acl policy delete takes a policy name")
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	if _, err := client.ACL().PolicyDelete(c.Context, c.Args().First()); err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.App.Writer, "Policy %q deleted\n", c.Args().First())
	return err
}

func aclTokenCreate(c *cli.Context) error {
	if c.NArg() != 0 {
		return usageError(c, "acl token create takes no arguments (policies go in -policy)")
	}
	if c.Duration("ttl") < 0 {
		return usageError(c, "-ttl %s is negative", c.Duration("ttl"))
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	resp, err := client.ACL().TokenCreate(c.Context, &pb.ACLTokenCreateRequest{
		Name: c.String("name"), Type: c.String("type"), Policies: c.StringSlice("policy"), TtlMs: c.Duration("ttl").Milliseconds()})
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, resp)
	}
	return printToken(c.App.Writer, resp.GetToken(), resp.GetSecretId())
}

func aclTokenList(c *cli.Context) error {
	if c.NArg() != 0 {
		return usageError(c, "acl token list takes no arguments")
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	ts, _, err := api.AllPages(c.Context, &api.QueryOptions{PerPage: listPerPage}, client.ACL().Tokens)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSONList(c.App.Writer, ts)
	}
	if len(ts) == 0 {
		_, err := fmt.Fprintln(c.App.Writer, "No tokens")
		return err
	}
	tw := newTable(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "Name\tType\tAccessor ID\tPolicies\tExpires")
	for _, t := range ts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.GetName(), t.GetType(), t.GetAccessorId(), strings.Join(t.GetPolicies(), ","), expiry(t.GetExpirationTime()))
	}
	return tw.Flush()
}

func aclTokenInfo(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageError(c, "acl token info takes an accessor ID")
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	t, _, err := client.ACL().Token(c.Context, c.Args().First(), nil)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, t)
	}
	return printToken(c.App.Writer, t, "")
}

func aclTokenUpdate(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageError(c, "acl token update takes an accessor ID")
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	accessor := c.Args().First()
	cur, _, err := client.ACL().Token(c.Context, accessor, nil)
	if err != nil {
		return err
	}
	req := &pb.ACLTokenUpdateRequest{AccessorId: accessor, Name: cur.GetName(), Policies: cur.GetPolicies()}
	if c.IsSet("name") {
		req.Name = c.String("name")
	}
	if c.IsSet("policy") {
		req.Policies = c.StringSlice("policy")
	}
	t, err := client.ACL().TokenUpdate(c.Context, req)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, t)
	}
	return printToken(c.App.Writer, t, "")
}

func aclTokenDelete(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageError(c, "acl token delete takes an accessor ID")
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	if _, err := client.ACL().TokenDelete(c.Context, c.Args().First()); err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.App.Writer, "Token %s deleted\n", c.Args().First())
	return err
}

func aclTokenSelf(c *cli.Context) error {
	if c.NArg() != 0 {
		return usageError(c, "acl token self takes no arguments")
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	t, err := client.ACL().TokenSelf(c.Context)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, t)
	}
	return printToken(c.App.Writer, t, "")
}

// printToken prints a token as `key = value` lines; the secret only when
// given (a token just made).
func printToken(w io.Writer, t *pb.ACLTokenView, secret string) error {
	tw := newTable(w, 0, 4, 1, ' ', 0)
	fmt.Fprintf(tw, "Accessor ID\t= %s\n", t.GetAccessorId())
	if secret != "" {
		fmt.Fprintf(tw, "Secret ID\t= %s\n", secret)
	}
	fmt.Fprintf(tw, "Name\t= %s\n", t.GetName())
	fmt.Fprintf(tw, "Type\t= %s\n", t.GetType())
	fmt.Fprintf(tw, "Policies\t= %s\n", strings.Join(t.GetPolicies(), ", "))
	fmt.Fprintf(tw, "Create Time\t= %s\n", formatNanos(t.GetCreateTime()))
	fmt.Fprintf(tw, "Expiry Time\t= %s\n", expiry(t.GetExpirationTime()))
	return tw.Flush()
}

func expiry(ns int64) string {
	if ns == 0 {
		return "never"
	}
	return time.Unix(0, ns).UTC().Format(time.RFC3339)
}
