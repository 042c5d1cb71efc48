package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strconv"

	"github.com/urfave/cli/v2"

	"berth.dev/berth/internal/tlsconf"
)

// File names of `berth tls`, as Nomad names its own (nomad-agent-ca.pem,
// global-server-nomad.pem, ...).
const (
	caCertFile = "berth-agent-ca.pem"
	caKeyFile  = "berth-agent-ca-key.pem"
)

func tlsCommand() *cli.Command {
	return &cli.Command{
		Name:  "tls",
		Usage: "make a CA and certificates for a cluster's mutual TLS",
		Subcommands: []*cli.Command{
			{
				Name:  "ca",
				Usage: "certificate authority",
				Subcommands: []*cli.Command{{
					Name:  "create",
					Usage: "create a CA: " + caCertFile + " and " + caKeyFile + " in the current directory",
					Flags: []cli.Flag{
						&cli.IntFlag{Name: "days", Value: tlsconf.DefaultCADays, Usage: "days the CA is valid for"},
						&cli.StringFlag{Name: "common-name", Usage: "the CA's common name", DefaultText: "Berth Agent CA <serial>"},
					},
					Action: tlsCACreate,
				}},
			},
			{
				Name:  "cert",
				Usage: "certificates",
				Subcommands: []*cli.Command{{
					Name:  "create",
					Usage: "create a server, client or cli certificate signed by the CA, in the current directory",
					Description: "Names the files <region>-<role>-berth.pem and <region>-<role>-berth-key.pem\n" +
						"(numbered -1, -2, ... when those exist). A server certificate names server.<region>.berth,\n" +
						"a client's client.<region>.berth, the CLI's cli.<region>.berth; all name localhost, and\n" +
						"server and client certificates 127.0.0.1.",
					Flags: []cli.Flag{
						&cli.BoolFlag{Name: "server", Usage: "a server certificate"},
						&cli.BoolFlag{Name: "client", Usage: "a client certificate"},
						&cli.BoolFlag{Name: "cli", Usage: "a certificate for the CLI and API users"},
						&cli.StringFlag{Name: "region", Value: tlsconf.DefaultRegion, Usage: "the region the certificate is for"},
						&cli.StringFlag{Name: "ca", Value: caCertFile, Usage: "the CA certificate"},
						&cli.StringFlag{Name: "key", Value: caKeyFile, Usage: "the CA key"},
						&cli.StringSliceFlag{Name: "additional-dnsname", Usage: "another DNS name (repeatable)"},
						&cli.StringSliceFlag{Name: "additional-ipaddress", Usage: "another IP address (repeatable)"},
						&cli.IntFlag{Name: "days", Value: tlsconf.DefaultCertDays, Usage: "days the certificate is valid for"},
					},
					Action: tlsCertCreate,
				}},
			},
		},
	}
}

func tlsCACreate(c *cli.Context) error {
	if c.NArg() > 0 {
		return usageError(c, "tls ca create takes no arguments, got %q", c.Args().Slice())
	}
	if c.Int("days") < 1 {
		return usageError(c, "-days must be at least 1, got %d", c.Int("days"))
	}
	for _, f := range []string{caCertFile, caKeyFile} {
		if _, err := os.Stat(f); err == nil {
			return fmt.Errorf("%s already exists: a new CA would orphan every certificate it signed (move it away first)", f)
		}
	}
	ca, err := tlsconf.NewCA(tlsconf.CAOptions{CommonName: c.String("common-name"), Days: c.Int("days")})
	if err != nil {
		return err
	}
	if err := writeNew(caCertFile, ca.Cert, 0o644); err != nil {
		return err
	}
	if err := writeNew(caKeyFile, ca.Key, 0o600); err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "==> CA certificate saved to: %s\n==> CA certificate key saved to: %s\n", caCertFile, caKeyFile)
	return nil
}

func tlsCertCreate(c *cli.Context) error {
	if c.NArg() > 0 {
		return usageError(c, "tls cert create takes no arguments, got %q", c.Args().Slice())
	}
	var roles []tlsconf.Role
	for _, r := range []tlsconf.Role{tlsconf.RoleServer, tlsconf.RoleClient, tlsconf.RoleCLI} {
		if c.Bool(string(r)) {
			roles = append(roles, r)
		}
	}
	if len(roles) != 1 {
		return usageError(c, "give exactly one of -server, -client and -cli")
	}
	role := roles[0]
	region := c.String("region")
	if err := checkRegionName(region); err != nil {
		return usageError(c, "-region %q: %v", region, err)
	}
	if c.Int("days") < 1 {
		return usageError(c, "-days must be at least 1, got %d", c.Int("days"))
	}
	var ips []net.IP
	for _, s := range c.StringSlice("additional-ipaddress") {
		ip := net.ParseIP(s)
		if ip == nil {
			return usageError(c, "-additional-ipaddress %q is not an IP address", s)
		}
		ips = append(ips, ip)
	}
	caPath, keyPath := c.String("ca"), c.String("key")
	var ca tlsconf.PEM
	var err error
	if ca.Cert, err = os.ReadFile(caPath); err != nil {
		return fmt.Errorf("reading the CA certificate (-ca): %w (make one with `berth tls ca create`)", err)
	}
	if ca.Key, err = os.ReadFile(keyPath); err != nil {
		return fmt.Errorf("reading the CA key (-key): %w", err)
	}
	if _, _, err := tlsconf.ParseCA(ca); err != nil {
		return fmt.Errorf("%s and %s: %w", caPath, keyPath, err)
	}
	cert, err := tlsconf.NewCert(ca, tlsconf.CertOptions{
		Role: role, Region: region, DNSNames: c.StringSlice("additional-dnsname"), IPs: ips, Days: c.Int("days"),
	})
	if err != nil {
		return err
	}
	certPath, keyOut, err := certFileNames(fmt.Sprintf("%s-%s-%s", region, role, tlsconf.Domain))
	if err != nil {
		return err
	}
	if role == tlsconf.RoleServer {
		fmt.Fprintln(c.App.Writer, "==> WARNING: a server certificate grants the authority to become a server\n"+
			"    and read all the cluster's state. Put it only on server hosts and keep it as safe as the CA key.")
	}
	if err := writeNew(certPath, cert.Cert, 0o644); err != nil {
		return err
	}
	if err := writeNew(keyOut, cert.Key, 0o600); err != nil {
		return err
	}
	noun := map[tlsconf.Role]string{tlsconf.RoleServer: "Server", tlsconf.RoleClient: "Client", tlsconf.RoleCLI: "Cli"}[role]
	fmt.Fprintf(c.App.Writer, "==> Using CA file %s and CA key %s\n==> %s certificate saved to: %s\n==> %s certificate key saved to: %s\n",
		caPath, keyPath, noun, certPath, noun, keyOut)
	return nil
}

// certFileNames are prefix.pem and prefix-key.pem, or the first numbered
// pair (prefix-1.pem, prefix-1-key.pem, ...) of which neither exists. An
// error other than not-existing (a path through a file, no permission)
// is returned, naming the file.
func certFileNames(prefix string) (string, string, error) {
	for i := 0; ; i++ {
		p := prefix
		if i > 0 {
			p += "-" + strconv.Itoa(i)
		}
		cert, key := p+".pem", p+"-key.pem"
		certExists, err := exists(cert)
		if err != nil {
			return "", "", err
		}
		keyExists, err := exists(key)
		if err != nil {
			return "", "", err
		}
		if !certExists && !keyExists {
			return cert, key, nil
		}
	}
}

// exists reports whether path exists; an error other than its not
// existing is returned (os's error names the path).
func exists(path string) (bool, error) {
	_, err := os.Lstat(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("choosing the certificate's file name: %w", err)
}

// writeNew writes a file that must not exist yet, with mode perm (a key
// is never readable by others, whatever the umask).
func writeNew(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// checkRegionName allows one DNS label, as the agent's region key.
func checkRegionName(s string) error {
	if s == "" {
		return errors.New("empty")
	}
	for i, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' && i > 0 && i < len(s)-1
		if !ok {
			return errors.New("not a DNS label (lower-case letters, digits and '-')")
		}
	}
	return nil
}
