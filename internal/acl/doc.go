// Package acl is berth's access control, without I/O: policies read from
// HCL, the ACL object a token's policies merge into, and token secrets.
//
// A policy names, per resource (job, volume, plugin, node, operator,
// agent), a coarse policy ("deny", "read", "write"; plugin also "list")
// and/or fine capabilities, as Nomad's policies do:
//
//	job      { policy = "read"  capabilities = ["submit-job"] }
//	volume   { capabilities = ["csi-read-volume", "csi-mount-volume"] }
//	operator { policy = "deny" }
//
// Parse reads one with file:line:col errors through internal/hclsrc.
// New merges the rules of several policies into one *ACL: a resource gets
// the union of the capabilities its rules grant, except that a deny in any
// of them (policy "deny" or capability "deny") takes everything on that
// resource away. ACL.Allows answers one check; Management allows all.
//
// Tokens: a secret is 256 random bits, hex-encoded; only its SHA-256 hash
// is ever stored (HashSecret) and a presented secret is compared with the
// stored hash in constant time (Match). A token is named by its accessor
// ID (a UUID), which is safe to log; the secret never is. FromHeader reads
// the secret a request carries in X-Berth-Token or Authorization: Bearer.
package acl
