package cli

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		t.Fatalf("%s: no PEM certificate", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func wantMode(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != mode {
		t.Errorf("%s: mode %v, want %v", path, fi.Mode().Perm(), mode)
	}
}

func wantIPs(t *testing.T, c *x509.Certificate, want ...string) {
	t.Helper()
	var got []string
	for _, ip := range c.IPAddresses {
		got = append(got, ip.String())
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s: IP SANs %v, want %v", c.Subject.CommonName, got, want)
	}
}

// TestTLSCommands makes a CA and every kind of certificate with the CLI
// and checks the files, their names, SANs, uses and modes.
func TestTLSCommands(t *testing.T) {
	t.Chdir(t.TempDir())
	code, out, errOut := berth(t, "tls", "ca", "create")
	if code != 0 || out != "==> CA certificate saved to: berth-agent-ca.pem\n==> CA certificate key saved to: berth-agent-ca-key.pem\n" {
		t.Fatalf("tls ca create: exit %d\n%s%s", code, out, errOut)
	}
	wantMode(t, "berth-agent-ca.pem", 0o644)
	wantMode(t, "berth-agent-ca-key.pem", 0o600)
	ca := readCert(t, "berth-agent-ca.pem")
	if !ca.IsCA || !strings.HasPrefix(ca.Subject.CommonName, "Berth Agent CA ") || ca.NotAfter.Before(time.Now().Add(4*365*24*time.Hour)) {
		t.Fatalf("CA: IsCA %v, CN %q, until %v", ca.IsCA, ca.Subject.CommonName, ca.NotAfter)
	}
	// A second CA would orphan the first one's certificates.
	if code, _, errOut := berth(t, "tls", "ca", "create"); code != 1 || !strings.Contains(errOut, "berth-agent-ca.pem already exists") {
		t.Fatalf("second tls ca create: exit %d, %q", code, errOut)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)

	// Two server certificates: the second is numbered.
	for i, name := range []string{"global-server-berth", "global-server-berth-1"} {
		code, out, errOut := berth(t, "tls", "cert", "create", "-server")
		if code != 0 || !strings.Contains(out, "WARNING") ||
			!strings.Contains(out, "==> Server certificate saved to: "+name+".pem\n==> Server certificate key saved to: "+name+"-key.pem\n") {
			t.Fatalf("tls cert create -server #%d: exit %d\n%s%s", i+1, code, out, errOut)
		}
		wantMode(t, name+".pem", 0o644)
		wantMode(t, name+"-key.pem", 0o600)
		c := readCert(t, name+".pem")
		if !slices.Equal(c.DNSNames, []string{"server.global.berth", "localhost"}) || c.Subject.CommonName != "server.global.berth" {
			t.Errorf("%s: CN %q, DNS SANs %v", name, c.Subject.CommonName, c.DNSNames)
		}
		wantIPs(t, c, "127.0.0.1")
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: "server.global.berth",
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s does not verify as a server: %v", name, err)
		}
		if d := c.NotAfter.Sub(c.NotBefore); d < 364*24*time.Hour || d > 366*24*time.Hour {
			t.Errorf("%s: valid for %v, want a year", name, d)
		}
	}

	code, out, errOut = berth(t, "tls", "cert", "create", "-client", "-region", "eu", "-days", "30",
		"-additional-dnsname", "node1.example", "-additional-ipaddress", "10.0.0.5")
	if code != 0 || !strings.Contains(out, "Client certificate saved to: eu-client-berth.pem") || strings.Contains(out, "WARNING") {
		t.Fatalf("tls cert create -client: exit %d\n%s%s", code, out, errOut)
	}
	wantMode(t, "eu-client-berth-key.pem", 0o600)
	c := readCert(t, "eu-client-berth.pem")
	if !slices.Equal(c.DNSNames, []string{"client.eu.berth", "localhost", "node1.example"}) {
		t.Errorf("client: DNS SANs %v", c.DNSNames)
	}
	wantIPs(t, c, "127.0.0.1", "10.0.0.5")
	if d := c.NotAfter.Sub(c.NotBefore); d != 30*24*time.Hour {
		t.Errorf("client: valid for %v, want 30 days", d)
	}

	code, out, errOut = berth(t, "tls", "cert", "create", "-cli")
	if code != 0 || !strings.Contains(out, "Cli certificate saved to: global-cli-berth.pem\n") {
		t.Fatalf("tls cert create -cli: exit %d\n%s%s", code, out, errOut)
	}
	wantMode(t, "global-cli-berth-key.pem", 0o600)
	c = readCert(t, "global-cli-berth.pem")
	if !slices.Equal(c.DNSNames, []string{"cli.global.berth", "localhost"}) || !slices.Equal(c.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
		t.Errorf("cli: DNS SANs %v, uses %v", c.DNSNames, c.ExtKeyUsage)
	}
	wantIPs(t, c)

	for _, tc := range []struct {
		argv []string
		code int
		want string
	}{
		{[]string{"tls", "cert", "create"}, exitUsage, "exactly one of -server, -client and -cli"},
		{[]string{"tls", "cert", "create", "-server", "-client"}, exitUsage, "exactly one of"},
		{[]string{"tls", "cert", "create", "-client", "-additional-ipaddress", "10.0.0"}, exitUsage, `"10.0.0" is not an IP address`},
		{[]string{"tls", "cert", "create", "-client", "-region", "Bad_Region"}, exitUsage, `-region "Bad_Region"`},
		{[]string{"tls", "cert", "create", "-client", "-ca", "nope.pem"}, exitError, "nope.pem"},
		{[]string{"tls", "cert", "create", "-client", "-key", "global-cli-berth-key.pem"}, exitError, "CA key does not match"},
	} {
		code, _, errOut := berth(t, tc.argv...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("berth %s: exit %d, stderr %q; want exit %d and %q", strings.Join(tc.argv, " "), code, errOut, tc.code, tc.want)
		}
	}
	if _, err := os.Stat("global-client-berth.pem"); err == nil {
		t.Error("a refused tls cert create wrote a certificate")
	}
}

// TestCertFileNamesReturnsLstatErrors: a name that cannot be checked (here
// a path through a regular file: ENOTDIR) is an error, not an endless
// search for a free number.
func TestCertFileNamesReturnsLstatErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := certFileNames(filepath.Join(file, "global-client-berth")); err == nil || !strings.Contains(err.Error(), file) {
		t.Fatalf("certFileNames under a file: %v, want an error naming it", err)
	}
	// Taken names are skipped.
	prefix := filepath.Join(dir, "global-client-berth")
	if err := os.WriteFile(prefix+"-key.pem", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cert, key, err := certFileNames(prefix)
	if err != nil || cert != prefix+"-1.pem" || key != prefix+"-1-key.pem" {
		t.Fatalf("certFileNames: %q %q %v, want the -1 pair", cert, key, err)
	}
}

// TestRunDevRefusesTLS: `berth run -dev` keeps TLS off; a -config file
// turning it on is refused before any agent starts, naming the key.
func TestRunDevRefusesTLS(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, argv := range [][]string{{"tls", "ca", "create"}, {"tls", "cert", "create", "-server"}} {
		if code, out, errOut := berth(t, argv...); code != 0 {
			t.Fatalf("berth %s: exit %d\n%s%s", strings.Join(argv, " "), code, out, errOut)
		}
	}
	hcl := filepath.Join(dir, "tls.hcl")
	src := "tls {\n  ca_file = \"" + filepath.Join(dir, "berth-agent-ca.pem") + "\"\n  cert_file = \"" + filepath.Join(dir, "global-server-berth.pem") +
		"\"\n  key_file = \"" + filepath.Join(dir, "global-server-berth-key.pem") + "\"\n  rpc = true\n}\n"
	if err := os.WriteFile(hcl, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := berth(t, "run", "-dev", "-config", hcl)
	if code == 0 || !strings.Contains(errOut, "tls.hcl:5:9: tls.rpc: berth run -dev keeps TLS off") {
		t.Fatalf("run -dev with tls.rpc: exit %d\n%s", code, errOut)
	}
}
