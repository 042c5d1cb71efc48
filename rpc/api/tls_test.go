package api

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"berth.dev/berth/internal/tlsconf"
)

// httpsAgent is an HTTPS server with a certificate of a fresh CA that
// requires client certificates of it (verify_https_client), answering
// /v1/agent/self; it returns its URL and the directory of the files: ca.pem,
// cli.pem, cli-key.pem.
func httpsAgent(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	ca, err := tlsconf.NewCA(tlsconf.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srvCert, err := tlsconf.NewCert(ca, tlsconf.CertOptions{Role: tlsconf.RoleServer})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := tlsconf.NewCert(ca, tlsconf.CertOptions{Role: tlsconf.RoleCLI})
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"ca.pem": ca.Cert, "server.pem": srvCert.Cert, "server-key.pem": srvCert.Key, "cli.pem": cli.Cert, "cli-key.pem": cli.Key}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	store, err := tlsconf.New(tlsconf.Options{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "server.pem"),
		KeyFile: filepath.Join(dir, "server-key.pem"), VerifyHTTPSClient: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"name":"a1"}`))
	}))
	// Not StartTLS: it would add httptest's own certificate, which Go
	// prefers to GetCertificate for a client that sends no server name.
	srv.Listener = tls.NewListener(srv.Listener, store.HTTPConfig())
	srv.Start()
	t.Cleanup(srv.Close)
	return strings.Replace(srv.URL, "http://", "https://", 1), dir
}

func TestNewClientTLS(t *testing.T) {
	url, dir := httpsAgent(t)
	ctx := context.Background()
	full := TLSConfig{CACert: filepath.Join(dir, "ca.pem"), ClientCert: filepath.Join(dir, "cli.pem"), ClientKey: filepath.Join(dir, "cli-key.pem")}
	c, err := NewClientTLS(url, full)
	if err != nil {
		t.Fatal(err)
	}
	if self, err := c.AgentSelf(ctx); err != nil || self.GetName() != "a1" {
		t.Fatalf("AgentSelf over HTTPS with a client certificate: %v, %v", self, err)
	}
	// Without the client certificate the agent refuses the connection.
	c, err = NewClientTLS(url, TLSConfig{CACert: full.CACert})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AgentSelf(ctx); err == nil {
		t.Fatal("an agent verifying clients answered a client without a certificate")
	}
	// Without the CA, the agent's certificate is not trusted.
	c, err = NewClientTLS(url, TLSConfig{ClientCert: full.ClientCert, ClientKey: full.ClientKey})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AgentSelf(ctx); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("an agent of an unknown CA: %v", err)
	}
	// NewClient reads the environment.
	t.Setenv(EnvCACert, full.CACert)
	t.Setenv(EnvClientCert, full.ClientCert)
	t.Setenv(EnvClientKey, full.ClientKey)
	c, err = NewClient(url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AgentSelf(ctx); err != nil {
		t.Fatalf("NewClient with BERTH_CACERT, BERTH_CLIENT_CERT, BERTH_CLIENT_KEY: %v", err)
	}
}

func TestNewClientTLSErrorsNameTheFile(t *testing.T) {
	_, dir := httpsAgent(t)
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		cfg  TLSConfig
		want string
	}{
		{TLSConfig{CACert: missing}, "-ca-cert, BERTH_CACERT): open " + missing},
		{TLSConfig{CACert: filepath.Join(dir, "cli-key.pem")}, "cli-key.pem (-ca-cert, BERTH_CACERT): no PEM certificate"},
		{TLSConfig{ClientCert: filepath.Join(dir, "cli.pem")}, "needs its key (-client-key, BERTH_CLIENT_KEY)"},
		{TLSConfig{ClientKey: filepath.Join(dir, "cli-key.pem")}, "needs its certificate (-client-cert, BERTH_CLIENT_CERT)"},
		{TLSConfig{ClientCert: filepath.Join(dir, "cli.pem"), ClientKey: filepath.Join(dir, "server-key.pem")}, "client certificate " + filepath.Join(dir, "cli.pem")},
	} {
		if _, err := NewClientTLS("https://127.0.0.1:1", tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewClientTLS(%+v): %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// TestNewClientTLSPlainHTTPIgnoresTLS: for an http:// address the TLS
// settings are not loaded, so stale or broken files do not get in the way.
func TestNewClientTLSPlainHTTPIgnoresTLS(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "gone.pem")
	for _, cfg := range []TLSConfig{
		{CACert: missing},
		{ClientKey: missing},
		{ClientCert: missing, ClientKey: missing},
	} {
		for _, addr := range []string{"http://127.0.0.1:1", "127.0.0.1:1"} {
			if _, err := NewClientTLS(addr, cfg); err != nil {
				t.Errorf("NewClientTLS(%q, %+v): %v", addr, cfg, err)
			}
		}
	}
}
