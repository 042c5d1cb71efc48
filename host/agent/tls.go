package agent

import (
	"crypto/tls"
	"net"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/tlsconf"
	"berth.dev/berth/rpc/errcode"
)

// newTLSStore loads the tls block's files when it turns TLS on; nil when
// it does not. The error names the file.
func newTLSStore(cfg *Config) (*tlsconf.Store, error) {
	if !cfg.TLS.Enabled() {
		return nil, nil
	}
	return tlsconf.New(cfg.tlsOptions())
}

// rpcTLS is the store of the agent's RPC connections: nil unless tls.rpc.
func (a *Agent) rpcTLS() *tlsconf.Store {
	if !a.cfg.TLS.RPC {
		return nil
	}
	return a.tls
}

// listenHTTP wraps the HTTP listener in TLS when tls.http is on.
func (a *Agent) listenHTTP(lis net.Listener) net.Listener {
	if !a.cfg.TLS.HTTP {
		return lis
	}
	return tls.NewListener(lis, a.tls.HTTPConfig())
}

// HTTPURL is the HTTP API's URL: https:// when tls.http is on.
func (a *Agent) HTTPURL() string {
	if a.cfg.TLS.HTTP {
		return "https://" + a.HTTPAddr()
	}
	return "http://" + a.HTTPAddr()
}

// ErrTLSOff is returned by ReloadTLS on an agent that runs without TLS.
var ErrTLSOff = errcode.New(codes.FailedPrecondition, "tls is not enabled in this agent's configuration")

// ReloadTLS reads the tls block's files again (on SIGHUP): new connections
// get the new certificate and CA; connections made before keep theirs. On
// error the agent goes on with what it had.
func (a *Agent) ReloadTLS() error {
	if a.tls == nil {
		a.logger.Info("reload: tls is off, nothing to reload")
		return ErrTLSOff
	}
	if err := a.tls.Reload(); err != nil {
		a.logger.Error("tls reload failed; keeping the certificates loaded before", "error", err)
		return err
	}
	leaf := a.tls.Leaf()
	a.logger.Info("tls certificates reloaded", "subject", leaf.Subject.CommonName, "not_after", leaf.NotAfter)
	return nil
}
