package api

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
)

// The environment variables of the TLS settings, as Nomad's NOMAD_CACERT,
// NOMAD_CLIENT_CERT and NOMAD_CLIENT_KEY.
const (
	EnvCACert     = "BERTH_CACERT"
	EnvClientCert = "BERTH_CLIENT_CERT"
	EnvClientKey  = "BERTH_CLIENT_KEY"
)

// TLSConfig says how a client reaches an https:// agent.
type TLSConfig struct {
	// CACert is a PEM file of the CA(s) the agent's certificate must chain
	// to; empty is the system's roots.
	CACert string
	// ClientCert and ClientKey are the PEM certificate and key presented
	// to an agent that verifies clients (verify_https_client); both or
	// neither.
	ClientCert string
	ClientKey  string
	// ServerName is the name the agent's certificate must carry; empty is
	// the address's host (agents' certificates name localhost and
	// 127.0.0.1, and their role, server.<region>.berth).
	ServerName string
}

// TLSConfigFromEnv reads BERTH_CACERT, BERTH_CLIENT_CERT and
// BERTH_CLIENT_KEY.
func TLSConfigFromEnv() TLSConfig {
	return TLSConfig{
		CACert:     os.Getenv(EnvCACert),
		ClientCert: os.Getenv(EnvClientCert),
		ClientKey:  os.Getenv(EnvClientKey),
	}
}

func (t TLSConfig) empty() bool {
	return t == TLSConfig{}
}

// build loads the files; errors name the setting and the file.
func (t TLSConfig) build() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CACert != "" {
		b, err := os.ReadFile(t.CACert)
		if err != nil {
			return nil, fmt.Errorf("api: CA certificate (-ca-cert, %s): %w", EnvCACert, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("api: CA certificate %s (-ca-cert, %s): no PEM certificate in it", t.CACert, EnvCACert)
		}
		cfg.RootCAs = pool
	}
	switch {
	case t.ClientCert != "" && t.ClientKey != "":
		pair, err := tls.LoadX509KeyPair(t.ClientCert, t.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("api: client certificate %s with key %s (-client-cert, -client-key): %w", t.ClientCert, t.ClientKey, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	case t.ClientCert != "":
		return nil, errors.New("api: a client certificate (-client-cert, " + EnvClientCert + ") needs its key (-client-key, " + EnvClientKey + ")")
	case t.ClientKey != "":
		return nil, errors.New("api: a client key (-client-key, " + EnvClientKey + ") needs its certificate (-client-cert, " + EnvClientCert + ")")
	}
	return cfg, nil
}

// NewClientTLS is NewClient with TLS settings for an https:// agent. For
// an http:// one they are not used, nor their files read: a stale
// BERTH_CLIENT_KEY does not break plain HTTP.
func NewClientTLS(addr string, t TLSConfig) (*Client, error) {
	c, err := newClient(addr)
	if err != nil {
		return nil, err
	}
	if t.empty() || c.base.Scheme != "https" {
		return c, nil
	}
	cfg, err := t.build()
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	tr.ForceAttemptHTTP2 = true
	c.http = &http.Client{Transport: tr, CheckRedirect: checkRedirect}
	return c, nil
}
