package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"berth.dev/berth/internal/tlsconf"
)

// writePKI writes a CA and a server certificate of region eu (the region
// of tlsConfigSrc) to dir, and beside them, for the role checks, a client
// certificate of eu (client.pem, client-key.pem) and a server certificate
// of global (global.pem, global-key.pem).
func writePKI(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	caPEM, err := tlsconf.NewCA(tlsconf.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ca = filepath.Join(dir, "ca.pem")
	files := map[string][]byte{ca: caPEM.Cert}
	for name, opts := range map[string]tlsconf.CertOptions{
		"server": {Role: tlsconf.RoleServer, Region: "eu"},
		"client": {Role: tlsconf.RoleClient, Region: "eu"},
		"global": {Role: tlsconf.RoleServer},
	} {
		c, err := tlsconf.NewCert(caPEM, opts)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Join(dir, name+".pem")], files[filepath.Join(dir, name+"-key.pem")] = c.Cert, c.Key
	}
	for path, data := range files {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return ca, filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
}

func tlsConfigSrc(ca, cert, key string) string {
	return fmt.Sprintf("name = \"a\"\ndata_dir = \"/tmp/a\"\nregion = \"eu\"\nserver {\n  enabled = true\n  bootstrap_expect = 1\n}\n"+
		"tls {\n  ca_file = %q\n  cert_file = %q\n  key_file = %q\n  rpc = true\n  http = true\n"+
		"  verify_server_hostname = true\n  verify_https_client = true\n}\n", ca, cert, key)
}

func TestParseConfigTLS(t *testing.T) {
	ca, cert, key := writePKI(t, t.TempDir())
	for _, tc := range []struct{ file, src string }{
		{"agent.hcl", tlsConfigSrc(ca, cert, key)},
		{"agent.json", fmt.Sprintf(`{"name": "a", "data_dir": "/tmp/a", "region": "eu", "server": {"enabled": true, "bootstrap_expect": 1},
			"tls": {"ca_file": %q, "cert_file": %q, "key_file": %q, "rpc": true, "http": true,
			"verify_server_hostname": true, "verify_https_client": true}}`, ca, cert, key)},
	} {
		t.Run(tc.file, func(t *testing.T) {
			c, err := ParseConfig(tc.file, []byte(tc.src))
			if err != nil {
				t.Fatal(err)
			}
			c = DefaultConfig().Merge(c)
			want := TLSConfig{CAFile: ca, CertFile: cert, KeyFile: key, RPC: true, HTTP: true, VerifyServerHostname: true, VerifyHTTPSClient: true}
			if c.TLS != want || c.EffectiveRegion() != "eu" {
				t.Fatalf("tls %+v region %q, want %+v and eu", c.TLS, c.Region, want)
			}
			if err := c.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
		})
	}
	if r := DefaultConfig().EffectiveRegion(); r != "global" {
		t.Fatalf("default region %q", r)
	}
	if DevConfig().TLS.Enabled() {
		t.Fatal("a dev agent has TLS on")
	}
}

// TestValidateTLSNamesTheFile: a tls block whose files are missing or do
// not load fails at the key's file:line:col, naming the file.
func TestValidateTLSNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key := writePKI(t, dir)
	missing := filepath.Join(dir, "missing.pem")
	otherCA, _, _ := writePKI(t, t.TempDir())
	for _, tc := range []struct {
		name          string
		ca, cert, key string
		want          string
	}{
		{"missing ca", missing, cert, key, "agent.hcl:9:13: tls.ca_file: tls: ca_file: open " + missing},
		{"missing cert", ca, missing, key, "agent.hcl:10:15: tls.cert_file: tls: cert_file: open " + missing},
		{"missing key", ca, cert, missing, "agent.hcl:11:14: tls.key_file: tls: key_file: open " + missing},
		{"key is a certificate", ca, cert, cert, "agent.hcl:11:14: tls.key_file: tls: key_file " + cert + ": no PEM private key"},
		{"cert of another CA", otherCA, cert, key, "agent.hcl:10:15: tls.cert_file: tls: cert_file " + cert + ": does not verify against ca_file " + otherCA},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig("agent.hcl", []byte(tlsConfigSrc(tc.ca, tc.cert, tc.key)))
			if err != nil {
				t.Fatal(err)
			}
			err = DefaultConfig().Merge(c).Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalidValue) {
				t.Fatalf("Validate: %v\nwant %q", err, tc.want)
			}
		})
	}
	c, err := ParseConfig("agent.hcl", []byte("name = \"a\"\ndata_dir = \"/tmp/a\"\nserver {\n  enabled = true\n  bootstrap_expect = 1\n}\ntls {\n  rpc = true\n}\n"))
	if err != nil {
		t.Fatal(err)
	}
	err = DefaultConfig().Merge(c).Validate()
	for _, k := range []string{"agent.hcl:8:9: tls.ca_file: required", "tls.cert_file: required", "tls.key_file: required"} {
		if err == nil || !strings.Contains(err.Error(), k) {
			t.Fatalf("Validate without files: %v, want %q", err, k)
		}
	}
	for _, bad := range []struct{ src, want string }{
		{"tls {\n  verify_hostname = true\n}\n", "agent.hcl:2:3"},
		{"tls {\n  rpc = \"yes\"\n}\n", "agent.hcl:2:9: tls.rpc"},
		{"region = \"EU west\"\n", "agent.hcl:1:10: region"},
	} {
		if _, err := ParseConfig("agent.hcl", []byte(bad.src)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ParseConfig(%q): %v, want %q", bad.src, err, bad.want)
		}
	}
}

// TestValidateTLSOwnRole: under verify_server_hostname the agent's own
// certificate must name its role in its region (server.eu.berth for a
// server, also one running a client; client.eu.berth for a client-only
// agent), else Validate fails at tls.cert_file.
func TestValidateTLSOwnRole(t *testing.T) {
	dir := t.TempDir()
	ca, _, _ := writePKI(t, dir)
	pem := func(name string) (string, string) {
		return filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	}
	const clientOnly = "client {\n  enabled = true\n  servers = [\"127.0.0.1:4647\"]\n}\n"
	const alsoClient = "client {\n  enabled = true\n}\n"
	for _, tc := range []struct {
		name, certName, extra, dropServer string
		want                              string
	}{
		{"server with a server certificate", "server", "", "", ""},
		{"server and client with a server certificate", "server", alsoClient, "", ""},
		{"client with a client certificate", "client", clientOnly, "yes", ""},
		{"server with a client certificate", "client", "", "", "agent.hcl:10:15: tls.cert_file: tls: cert_file " + filepath.Join(dir, "client.pem") + ": " + tlsconf.ErrOwnRole.Error()},
		{"server and client with a client certificate", "client", alsoClient, "", "not server.eu.berth"},
		{"client with a server certificate", "server", clientOnly, "yes", "not client.eu.berth"},
		{"server with a certificate of another region", "global", "", "", "not server.eu.berth"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cert, key := pem(tc.certName)
			src := tlsConfigSrc(ca, cert, key) + tc.extra
			if tc.dropServer != "" {
				src = strings.Replace(src, "server {\n  enabled = true\n  bootstrap_expect = 1\n}\n", "", 1)
			}
			c, err := ParseConfig("agent.hcl", []byte(src))
			if err != nil {
				t.Fatal(err)
			}
			err = DefaultConfig().Merge(c).Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "tls.cert_file") {
				t.Fatalf("Validate: %v\nwant %q at tls.cert_file", err, tc.want)
			}
		})
	}
}

// TestValidateTLSRefusedInDevMode: `berth run -dev` keeps TLS off; a tls
// block turning it on is refused at its key, not silently ignored.
func TestValidateTLSRefusedInDevMode(t *testing.T) {
	ca, cert, key := writePKI(t, t.TempDir())
	for _, tc := range []struct{ on, want string }{
		{"rpc = true\n  http = true", "agent.hcl:5:9: tls.rpc: "},
		{"http = true", "agent.hcl:5:10: tls.http: "},
	} {
		src := fmt.Sprintf("tls {\n  ca_file = %q\n  cert_file = %q\n  key_file = %q\n  %s\n}\n", ca, cert, key, tc.on)
		files, err := ParseConfig("agent.hcl", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		err = DevConfig().Merge(files).Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want+"berth run -dev keeps TLS off") || !errors.Is(err, ErrInvalidValue) {
			t.Fatalf("Validate of a dev agent with %q: %v, want %q", tc.on, err, tc.want)
		}
	}
	// Files without -dev, and -dev with the block's files but TLS off, load.
	files, err := ParseConfig("agent.hcl", []byte(fmt.Sprintf("tls {\n  ca_file = %q\n  rpc = false\n}\n", ca)))
	if err != nil {
		t.Fatal(err)
	}
	if err := DevConfig().Merge(files).Validate(); err != nil {
		t.Fatalf("a dev agent with TLS off: %v", err)
	}
}
