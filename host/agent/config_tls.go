package agent

import (
	"errors"
	"regexp"
	"sync"

	"berth.dev/berth/internal/tlsconf"
)

// TLSConfig is the agent's tls block (Nomad's shape):
//
//	tls {
//	  ca_file   = "berth-agent-ca.pem"
//	  cert_file = "global-server-berth.pem"
//	  key_file  = "global-server-berth-key.pem"
//	  rpc  = true  # mutual TLS on RPC, the tunnel, forwarding and raft
//	  http = true  # HTTPS API
//	  verify_server_hostname = true  # a server must show a server certificate
//	  verify_https_client    = true  # the HTTPS API wants client certificates
//	}
type TLSConfig struct {
	// CAFile, CertFile and KeyFile are PEM files: the CA bundle peers must
	// chain to, this agent's certificate and its key. They must exist and
	// load when RPC or HTTP is on; SIGHUP reloads them.
	CAFile   string
	CertFile string
	KeyFile  string
	// RPC turns on mutual TLS for every agent-to-agent connection.
	RPC bool
	// HTTP serves the API over HTTPS.
	HTTP bool
	// VerifyServerHostname makes a peer acting as a server present a
	// server.<region>.berth certificate.
	VerifyServerHostname bool
	// VerifyHTTPSClient makes the HTTPS API require a client certificate
	// signed by the CA.
	VerifyHTTPSClient bool
}

// Enabled reports whether the block turns TLS on anywhere.
func (t TLSConfig) Enabled() bool { return t.RPC || t.HTTP }

// regionAttr is the top-level region: the middle label of the role names
// in certificates (server.<region>.berth), "global" when unset.
var regionAttr = scalar("region", func(c *Config) *string { return &c.Region }, toString, checkRegion)

// tlsConfigBlock is the tls block's row of the configuration table.
var tlsConfigBlock = blockDef{key: "tls", attrs: []attrDef{
	scalar("ca_file", func(c *Config) *string { return &c.TLS.CAFile }, toString, nil),
	scalar("cert_file", func(c *Config) *string { return &c.TLS.CertFile }, toString, nil),
	scalar("key_file", func(c *Config) *string { return &c.TLS.KeyFile }, toString, nil),
	scalar("rpc", func(c *Config) *bool { return &c.TLS.RPC }, toBool, nil),
	scalar("http", func(c *Config) *bool { return &c.TLS.HTTP }, toBool, nil),
	scalar("verify_server_hostname", func(c *Config) *bool { return &c.TLS.VerifyServerHostname }, toBool, nil),
	scalar("verify_https_client", func(c *Config) *bool { return &c.TLS.VerifyHTTPSClient }, toBool, nil),
}}

// regionRE is compiled on first use: every berth command links this
// package, and a {0,61} repeat is dear to compile at each start-up.
var regionRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`) })

// checkRegion allows one DNS label: the region is part of a DNS name.
func checkRegion(s string) error {
	if s != "" && !regionRE().MatchString(s) {
		return invalidf("%q is not a region name (a DNS label: lower-case letters, digits and '-')", s)
	}
	return nil
}

// EffectiveRegion is Region, or tlsconf.DefaultRegion when unset.
func (c *Config) EffectiveRegion() string {
	if c.Region == "" {
		return tlsconf.DefaultRegion
	}
	return c.Region
}

// tlsOptions are the tlsconf options of the tls block.
func (c *Config) tlsOptions() tlsconf.Options {
	return tlsconf.Options{
		CAFile: c.TLS.CAFile, CertFile: c.TLS.CertFile, KeyFile: c.TLS.KeyFile,
		Region:               c.EffectiveRegion(),
		VerifyServerHostname: c.TLS.VerifyServerHostname,
		VerifyHTTPSClient:    c.TLS.VerifyHTTPSClient,
		Role:                 c.tlsRole(),
	}
}

// tlsRole is the role the agent's own certificate must name under
// verify_server_hostname: server for a server agent, also one that runs a
// client (as Nomad, whose peers check server.<region> of a server), client
// for a client-only agent.
func (c *Config) tlsRole() tlsconf.Role {
	switch {
	case c.Server.Enabled:
		return tlsconf.RoleServer
	case c.Client.Enabled:
		return tlsconf.RoleClient
	}
	return ""
}

// validateTLS checks the tls block: a dev agent keeps TLS off; with rpc or
// http on, the three files
// are named and load (a missing or unreadable file, a key that is not the
// certificate's, a certificate the CA did not sign, and under
// verify_server_hostname a certificate not naming the agent's role in its
// region), each problem at the file's key.
func (c *Config) validateTLS(errs *ConfigErrors) {
	if !c.TLS.Enabled() {
		return
	}
	on := c.pos("tls.rpc", "tls.http")
	if c.DevMode {
		// A dev agent is one process on 127.0.0.1 and keeps TLS off (as
		// ACL); refused rather than ignored so no one believes it is on.
		key := "tls.rpc"
		if !c.TLS.RPC {
			key = "tls.http"
		}
		errs.Add(on, key, ErrInvalidValue, "berth run -dev keeps TLS off: run the agent from -config files without -dev to use TLS, or set tls.rpc and tls.http to false")
		return
	}
	missing := false
	for _, f := range []struct{ key, val string }{{"ca_file", c.TLS.CAFile}, {"cert_file", c.TLS.CertFile}, {"key_file", c.TLS.KeyFile}} {
		if f.val == "" {
			errs.Add(on, "tls."+f.key, ErrInvalidValue, "required when tls.rpc or tls.http is true")
			missing = true
		}
	}
	if missing {
		return
	}
	if _, err := tlsconf.New(c.tlsOptions()); err != nil {
		path := "tls.cert_file"
		if fe := (*tlsconf.FileError)(nil); errors.As(err, &fe) {
			path = "tls." + fe.Key
		}
		errs.Add(c.pos(path), path, ErrInvalidValue, "%v", err)
	}
}
