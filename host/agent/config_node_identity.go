package agent

import "berth.dev/berth/host/server/endpoints"

// checkNodeIdentityEnforcement accepts server.node_identity_enforcement's
// values, "warn" and "strict".
func checkNodeIdentityEnforcement(s string) error {
	if s != endpoints.EnforceWarn && s != endpoints.EnforceStrict {
		return invalidf("%q is not a node identity enforcement (want %q or %q)", s, endpoints.EnforceWarn, endpoints.EnforceStrict)
	}
	return nil
}
