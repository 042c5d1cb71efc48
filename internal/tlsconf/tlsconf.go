package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"

	"berth.dev/berth/rpc/errcode"
)

// DefaultRegion is the region of an agent that names none, as Nomad's.
const DefaultRegion = "global"

// Domain is the last label of every role name.
const Domain = "berth"

// Role is what a certificate lets its holder act as.
type Role string

// The roles a certificate can name.
const (
	RoleServer Role = "server"
	RoleClient Role = "client"
	RoleCLI    Role = "cli"
)

// RoleName is the DNS SAN a certificate of role in region carries:
// "server.global.berth". An empty region is DefaultRegion.
func RoleName(role Role, region string) string {
	if region == "" {
		region = DefaultRegion
	}
	return string(role) + "." + region + "." + Domain
}

// Errors of the peer checks. A handshake refused for them fails with them
// wrapped, naming the peer certificate's subject.
var (
	// ErrUntrustedPeer: the peer's certificate is not signed by the CA,
	// has expired, or is not for the use it is put to.
	ErrUntrustedPeer = errcode.New(codes.Unauthenticated, "tls: peer certificate not trusted")
	// ErrPeerRole: the peer's certificate is trusted but does not name the
	// role the connection needs (a client certificate acting as a server).
	ErrPeerRole = errcode.New(codes.PermissionDenied, "tls: peer certificate does not name the role required")
	// ErrNoPeerCertificate: the peer sent no certificate where one is required.
	ErrNoPeerCertificate = errcode.New(codes.Unauthenticated, "tls: peer sent no certificate")
	// ErrOwnRole: with VerifyServerHostname, this agent's own certificate
	// does not name the role it runs as (Options.Role), so its peers would
	// refuse it.
	ErrOwnRole = errcode.New(codes.FailedPrecondition, "tls: this agent's certificate does not name its role")
)

// FileError is a problem with one of the files a Store loads: Key is the
// tls block's key naming it (ca_file, cert_file, key_file), Path the file.
type FileError struct {
	Key  string
	Path string
	Err  error
}

func (e *FileError) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("tls: %s: %v", e.Key, e.Err)
	}
	if errors.Is(e.Err, os.ErrNotExist) || errors.Is(e.Err, os.ErrPermission) {
		// os's error already names the file.
		return fmt.Sprintf("tls: %s: %v", e.Key, e.Err)
	}
	return fmt.Sprintf("tls: %s %s: %v", e.Key, e.Path, e.Err)
}

func (e *FileError) Unwrap() error { return e.Err }

// Options are an agent's tls block.
type Options struct {
	// CAFile holds the PEM CA certificates peers' certificates must chain to.
	CAFile string
	// CertFile and KeyFile are this agent's PEM certificate and its key.
	CertFile string
	KeyFile  string
	// Region names the roles (RoleName); empty is DefaultRegion.
	Region string
	// VerifyServerHostname makes a peer acting as a server present a
	// server certificate of Region.
	VerifyServerHostname bool
	// VerifyHTTPSClient makes the HTTPS API require a client certificate
	// signed by the CA.
	VerifyHTTPSClient bool
	// Role is what this agent runs as; with VerifyServerHostname its own
	// certificate must name it in Region (RoleName), at New and at every
	// Reload. A server agent, also when it runs a client, is RoleServer
	// (as Nomad: its peers check server.<region>); empty checks nothing.
	Role Role
	// Now is the clock certificates are checked against; nil is time.Now.
	Now func() time.Time
}

// material is one load of the files: what the handshakes read.
type material struct {
	cert  *tls.Certificate
	leaf  *x509.Certificate
	roots *x509.CertPool
}

// Store holds the current TLS material of an agent; its configs read it at
// every handshake, so Reload takes effect for new connections only.
type Store struct {
	opts Options
	cur  atomic.Pointer[material]
}

// New loads the files opts names; the error names the file at fault.
func New(opts Options) (*Store, error) {
	if opts.Region == "" {
		opts.Region = DefaultRegion
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Store{opts: opts}
	m, err := s.load()
	if err != nil {
		return nil, err
	}
	s.cur.Store(m)
	return s, nil
}

// Reload reads the files again and, when they load, makes them what new
// handshakes use; on error the previous material stays.
func (s *Store) Reload() error {
	m, err := s.load()
	if err != nil {
		return err
	}
	s.cur.Store(m)
	return nil
}

// Options returns the options the Store was made with (defaults filled in).
func (s *Store) Options() Options { return s.opts }

// Leaf returns this agent's current certificate.
func (s *Store) Leaf() *x509.Certificate { return s.cur.Load().leaf }

func (s *Store) load() (*material, error) {
	o := s.opts
	for _, f := range []struct{ key, path string }{{"ca_file", o.CAFile}, {"cert_file", o.CertFile}, {"key_file", o.KeyFile}} {
		if f.path == "" {
			return nil, &FileError{Key: f.key, Err: errors.New("required")}
		}
	}
	caPEM, err := os.ReadFile(o.CAFile)
	if err != nil {
		return nil, &FileError{Key: "ca_file", Path: o.CAFile, Err: err}
	}
	roots := x509.NewCertPool()
	n, err := addPEMCerts(roots, caPEM)
	if err != nil {
		return nil, &FileError{Key: "ca_file", Path: o.CAFile, Err: err}
	}
	if n == 0 {
		return nil, &FileError{Key: "ca_file", Path: o.CAFile, Err: errors.New("no PEM certificate in it")}
	}
	certPEM, err := os.ReadFile(o.CertFile)
	if err != nil {
		return nil, &FileError{Key: "cert_file", Path: o.CertFile, Err: err}
	}
	keyPEM, err := os.ReadFile(o.KeyFile)
	if err != nil {
		return nil, &FileError{Key: "key_file", Path: o.KeyFile, Err: err}
	}
	blk, _ := pem.Decode(certPEM)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, &FileError{Key: "cert_file", Path: o.CertFile, Err: errors.New("no PEM certificate in it")}
	}
	// The certificate is parsed before it is paired with the key, so a
	// malformed one is blamed on cert_file, not on the key.
	leaf, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, &FileError{Key: "cert_file", Path: o.CertFile, Err: err}
	}
	if blk, _ := pem.Decode(keyPEM); blk == nil || !isKeyBlock(blk.Type) {
		return nil, &FileError{Key: "key_file", Path: o.KeyFile, Err: errors.New("no PEM private key in it")}
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, &FileError{Key: "key_file", Path: o.KeyFile, Err: fmt.Errorf("not the key of cert_file %s: %w", o.CertFile, err)}
	}
	inter := x509.NewCertPool()
	for i, der := range cert.Certificate[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, &FileError{Key: "cert_file", Path: o.CertFile, Err: fmt.Errorf("certificate %d of the chain: %w", i+2, err)}
		}
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: o.Now(),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, &FileError{Key: "cert_file", Path: o.CertFile, Err: fmt.Errorf("does not verify against ca_file %s: %w", o.CAFile, err)}
	}
	if o.VerifyServerHostname && o.Role != "" && !HasRole(leaf, o.Role, o.Region) {
		return nil, &FileError{Key: "cert_file", Path: o.CertFile, Err: fmt.Errorf("%w: %q names %v, not %s (this agent runs as a %s, and verify_server_hostname is on)",
			ErrOwnRole, leaf.Subject.CommonName, leaf.DNSNames, RoleName(o.Role, o.Region), o.Role)}
	}
	return &material{cert: &cert, leaf: leaf, roots: roots}, nil
}

func isKeyBlock(t string) bool {
	return t == "PRIVATE KEY" || t == "EC PRIVATE KEY" || t == "RSA PRIVATE KEY"
}

// addPEMCerts adds every CERTIFICATE block of data to pool.
func addPEMCerts(pool *x509.CertPool, data []byte) (int, error) {
	n := 0
	for {
		var blk *pem.Block
		blk, data = pem.Decode(data)
		if blk == nil {
			return n, nil
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return n, err
		}
		pool.AddCert(c)
		n++
	}
}

// verify checks a peer's chain against the current CA for usage and, when
// role is set, that the leaf names it.
func (s *Store) verify(certs []*x509.Certificate, usage x509.ExtKeyUsage, role Role) error {
	if len(certs) == 0 {
		return ErrNoPeerCertificate
	}
	m := s.cur.Load()
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	leaf := certs[0]
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: m.roots, Intermediates: inter, CurrentTime: s.opts.Now(),
		KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return fmt.Errorf("%w: %q: %v", ErrUntrustedPeer, leaf.Subject.CommonName, err)
	}
	if role != "" && !HasRole(leaf, role, s.opts.Region) {
		return fmt.Errorf("%w: %q names %v, not %s", ErrPeerRole, leaf.Subject.CommonName, leaf.DNSNames, RoleName(role, s.opts.Region))
	}
	return nil
}

// HasRole reports whether cert names role in region among its DNS SANs.
func HasRole(cert *x509.Certificate, role Role, region string) bool {
	return cert != nil && slices.Contains(cert.DNSNames, RoleName(role, region))
}

// PeerIsServer reports whether a verified connection's peer presented a
// server certificate of this Store's region.
func (s *Store) PeerIsServer(cs tls.ConnectionState) bool {
	return len(cs.PeerCertificates) > 0 && HasRole(cs.PeerCertificates[0], RoleServer, s.opts.Region)
}

func (s *Store) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return s.cur.Load().cert, nil
}

func (s *Store) getClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return s.cur.Load().cert, nil
}

// serverSide is the config of a listener whose peers must present a
// certificate of the CA; role, when set, is the one they must name.
func (s *Store) serverSide(role Role) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: s.getCertificate,
		ClientAuth:     tls.RequireAnyClientCert,
		// VerifyConnection, not VerifyPeerCertificate: it runs on resumed
		// sessions too, so a session from before a CA change is checked
		// against the CA of now.
		VerifyConnection: func(cs tls.ConnectionState) error {
			return s.verify(cs.PeerCertificates, x509.ExtKeyUsageClientAuth, role)
		},
	}
}

// ServerConfig is the RPC listener's config: every peer presents a
// certificate of the CA (any role; the RPC server checks the role of its
// server-only methods with PeerIsServer).
func (s *Store) ServerConfig() *tls.Config { return s.serverSide("") }

// PeerConfig is the raft listener's config: with VerifyServerHostname,
// only a server certificate completes the handshake.
func (s *Store) PeerConfig() *tls.Config {
	var role Role
	if s.opts.VerifyServerHostname {
		role = RoleServer
	}
	return s.serverSide(role)
}

// ClientConfig is the config of a connection to a server (RPC, raft): it
// presents this agent's certificate and checks the server's against the
// current CA and, with VerifyServerHostname, that it is a server
// certificate of the region. The address dialled plays no part: servers
// are reached by IP and their certificates name their role.
func (s *Store) ClientConfig() *tls.Config {
	var role Role
	if s.opts.VerifyServerHostname {
		role = RoleServer
	}
	return &tls.Config{
		MinVersion:           tls.VersionTLS12,
		GetClientCertificate: s.getClientCertificate,
		// The chain and role are checked by VerifyConnection against the
		// CA of the moment; Go's own check would pin the CA of the config
		// and want the dialled address among the SANs.
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			return s.verify(cs.PeerCertificates, x509.ExtKeyUsageServerAuth, role)
		},
	}
}

// HTTPConfig is the HTTPS API's config: with VerifyHTTPSClient every
// request's connection presents a certificate of the CA.
func (s *Store) HTTPConfig() *tls.Config {
	if s.opts.VerifyHTTPSClient {
		c := s.serverSide("")
		c.NextProtos = []string{"h2", "http/1.1"}
		return c
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: s.getCertificate, NextProtos: []string{"h2", "http/1.1"}}
}

// DialOptions are the gRPC options of connections to servers under s:
// mutual TLS with ClientConfig. A nil Store gives none (plaintext).
func DialOptions(s *Store) []grpc.DialOption {
	if s == nil {
		return nil
	}
	return []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(s.ClientConfig()))}
}
