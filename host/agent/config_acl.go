package agent

// ACLConfig is the acl block: Nomad's shape.
//
//	acl {
//	  enabled = true
//	}
//
// With it, a server refuses every RPC whose token its method's need does not
// allow (host/authz), and the agent's HTTP API refuses a request before
// reading its body. Set it on every agent of a cluster, servers and clients.
// `berth run -dev` leaves it off.
type ACLConfig struct {
	Enabled bool
}

var aclAttrs = []attrDef{
	scalar("enabled", func(c *Config) *bool { return &c.ACL.Enabled }, toBool, nil),
}

// validateACL refuses acl.enabled without tls { rpc = true
// verify_server_hostname = true }. The methods only servers call on each
// other (a server joining raft, the tunnel and CSI relays, forwarded
// requests) carry no token: what proves the caller is a server is its
// server certificate, checked only under verify_server_hostname. Without
// it anyone reaching the RPC port could make itself a raft voter or relay
// CSI calls as a server, whatever the ACL; Nomad too relies on mutual TLS
// for this. A dev agent keeps both off.
func (c *Config) validateACL(errs *ConfigErrors) {
	if !c.ACL.Enabled || (c.TLS.RPC && c.TLS.VerifyServerHostname) {
		return
	}
	errs.Add(c.pos("acl.enabled"), "acl.enabled", ErrInvalidValue,
		"ACL needs tls { rpc = true  verify_server_hostname = true }: the calls only servers make (joining raft, relays, forwarded requests) are proven by a server certificate, so without it anyone reaching the RPC port could act as a server whatever the ACL (`berth tls ca create` and `berth tls cert create` make the files)")
}
