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
