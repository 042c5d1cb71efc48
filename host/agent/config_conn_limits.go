package agent

import (
	"net"
	"time"

	"berth.dev/berth/internal/connlimit"
	"berth.dev/berth/rpc"
)

// LimitsConfig is the agent's limits { … } block, in Nomad's shape and
// with its defaults: per-client-IP connection caps on the HTTP and RPC
// listeners, the RPC handshake timeout, and the largest gRPC message a
// server accepts. Zero disables a cap or the timeout.
type LimitsConfig struct {
	// HTTPMaxConnsPerClient bounds the open HTTP connections from one IP
	// (http_max_conns_per_client, default 100).
	HTTPMaxConnsPerClient int
	// RPCMaxConnsPerClient bounds the open RPC connections from one IP
	// (rpc_max_conns_per_client, default 100).
	RPCMaxConnsPerClient int
	// RPCHandshakeTimeout closes an RPC connection that sends nothing
	// within it, or has not completed its TLS and HTTP/2 handshakes within
	// it (server.Config.RPCHandshakeTimeout; rpc_handshake_timeout,
	// default 5s).
	RPCHandshakeTimeout time.Duration
	// MaxRequestBytes is the largest gRPC request a server receives
	// (max_request_bytes; default and ceiling rpc.MaxMessageSize, the
	// limit every hop a job travels shares).
	MaxRequestBytes int
}

// Defaults of the limits block (Nomad's for the three it shares).
const (
	DefaultMaxConnsPerClient   = 100
	DefaultRPCHandshakeTimeout = 5 * time.Second
	// minRequestBytes is the smallest max_request_bytes: below it a
	// node's registration or a plan could not reach a server.
	minRequestBytes = 1 << 20
)

// DefaultLimits returns the limits an agent starts from.
func DefaultLimits() LimitsConfig {
	return LimitsConfig{
		HTTPMaxConnsPerClient: DefaultMaxConnsPerClient,
		RPCMaxConnsPerClient:  DefaultMaxConnsPerClient,
		RPCHandshakeTimeout:   DefaultRPCHandshakeTimeout,
		MaxRequestBytes:       rpc.MaxMessageSize,
	}
}

// limitsBlock is the limits block's rows of the configuration table.
var limitsBlock = blockDef{key: "limits", attrs: []attrDef{
	scalar("http_max_conns_per_client", func(c *Config) *int { return &c.Limits.HTTPMaxConnsPerClient }, toInt, checkNonNegative[int]),
	scalar("rpc_max_conns_per_client", func(c *Config) *int { return &c.Limits.RPCMaxConnsPerClient }, toInt, checkNonNegative[int]),
	scalar("rpc_handshake_timeout", func(c *Config) *time.Duration { return &c.Limits.RPCHandshakeTimeout }, toDuration, checkNonNegative[time.Duration]),
	scalar("max_request_bytes", func(c *Config) *int { return &c.Limits.MaxRequestBytes }, toByteSize, checkMaxRequestBytes),
}}

// checkMaxRequestBytes bounds max_request_bytes: at most the message limit
// the servers' peers send with (a larger one would never be sent), at
// least what a registration or a plan needs. Zero (a Config built in Go)
// is the default.
func checkMaxRequestBytes(n int) error {
	if n != 0 && (n < minRequestBytes || n > rpc.MaxMessageSize) {
		return invalidf("%d bytes is out of range %d-%d (the message limit of every hop a job travels)", n, minRequestBytes, rpc.MaxMessageSize)
	}
	return nil
}

// limitHTTP wraps the HTTP listener with http_max_conns_per_client.
func (a *Agent) limitHTTP(l net.Listener, lim LimitsConfig) net.Listener {
	if lim.HTTPMaxConnsPerClient <= 0 {
		return l
	}
	return connlimit.Wrap(l, connlimit.Config{Name: "http", MaxPerIP: lim.HTTPMaxConnsPerClient, Logger: a.logger.Named("limits")})
}

// limitRPC wraps the RPC listener with rpc_max_conns_per_client and
// rpc_handshake_timeout.
func (a *Agent) limitRPC(l net.Listener, lim LimitsConfig) net.Listener {
	if lim.RPCMaxConnsPerClient <= 0 && lim.RPCHandshakeTimeout <= 0 {
		return l
	}
	return connlimit.Wrap(l, connlimit.Config{Name: "rpc", MaxPerIP: lim.RPCMaxConnsPerClient,
		HandshakeTimeout: lim.RPCHandshakeTimeout, Logger: a.logger.Named("limits")})
}

// requestSlack is what a job register request carries beside the job.
const requestSlack = 64 << 10

// validateRequestLimit refuses a server whose max_request_bytes cannot
// carry a job of server.job_max_size: such a job would pass the HTTP body
// limit and the job limits and then fail as a too-large gRPC message.
func (c *Config) validateRequestLimit(errs *ConfigErrors) {
	n, job := c.Limits.MaxRequestBytes, c.Server.JobLimits.MaxBytes
	if !c.Server.Enabled || n == 0 || job == 0 || n >= job+requestSlack {
		return
	}
	errs.Add(c.pos("limits.max_request_bytes", "server.job_max_size"), "limits.max_request_bytes", ErrInvalidValue,
		"%d bytes cannot carry a job of server.job_max_size (%d bytes) and its request (%d bytes more)", n, job, requestSlack)
}
