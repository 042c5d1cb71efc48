// Package tlsconf builds the TLS configurations of berth's mutual TLS: the
// agent's RPC and raft listeners and dialers, and its HTTPS API.
//
// A Store holds what the agent's tls block names — a CA bundle, a
// certificate and its key — loaded and checked at start (errors name the
// file). Every *tls.Config it hands out reads the Store's current material
// at each handshake (GetCertificate, GetClientCertificate, and a
// VerifyPeerCertificate that checks the chain against the current CA), so
// Reload swaps certificates and CA for new connections while the
// connections made before keep working.
//
// Roles live in certificates: a server's names server.<region>.berth, a
// client's client.<region>.berth, the CLI's cli.<region>.berth (DNS SANs;
// see RoleName). With VerifyServerHostname, a peer acting as a server must
// present a server certificate: dialling a server checks it (ClientConfig),
// the raft listener refuses anything else (PeerConfig), and the RPC server
// asks PeerHasRole for its server-only methods.
//
// Generate makes a CA and certificates (ECDSA P-256), as `berth tls`
// does.
package tlsconf
