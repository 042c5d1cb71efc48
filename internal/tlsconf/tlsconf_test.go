package tlsconf

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pki is a CA and helpers that write certificates of it to a directory.
type pki struct {
	t   *testing.T
	dir string
	ca  PEM
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	ca, err := NewCA(CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &pki{t: t, dir: t.TempDir(), ca: ca}
}

func (p *pki) write(name string, data []byte) string {
	p.t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		p.t.Fatal(err)
	}
	return path
}

// store makes a certificate of opts signed by p's CA and a Store of it
// trusting trust's CA.
func (p *pki) store(name string, opts CertOptions, trust *pki, verify bool) *Store {
	p.t.Helper()
	c, err := NewCert(p.ca, opts)
	if err != nil {
		p.t.Fatal(err)
	}
	s, err := New(Options{
		CAFile:               p.write(name+"-ca.pem", p.ca.Cert),
		CertFile:             p.write(name+".pem", c.Cert),
		KeyFile:              p.write(name+"-key.pem", c.Key),
		VerifyServerHostname: verify,
		VerifyHTTPSClient:    verify,
	})
	if err != nil {
		p.t.Fatal(err)
	}
	if trust != p {
		// Load refuses a pair its CA does not sign: keep the pair, trust
		// only the other CA.
		m := s.cur.Load()
		s.cur.Store(&material{cert: m.cert, leaf: m.leaf, roots: trust.roots()})
	}
	return s
}

func (p *pki) roots() *x509.CertPool {
	p.t.Helper()
	pool := x509.NewCertPool()
	if _, err := addPEMCerts(pool, p.ca.Cert); err != nil {
		p.t.Fatal(err)
	}
	return pool
}

// serve accepts TLS connections on loopback with cfg and echoes lines.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

// dial connects and completes the handshake (the server's verdict
// included, by a round trip).
func dial(addr string, cfg *tls.Config) (*tls.Conn, error) {
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	if err := roundTrip(c); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func roundTrip(c *tls.Conn) error {
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return err
	}
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "ping\n" {
		return errors.New("echo: " + line)
	}
	return nil
}

func TestRoleNames(t *testing.T) {
	if got := RoleName(RoleServer, ""); got != "server.global.berth" {
		t.Fatalf("RoleName = %q", got)
	}
	if got := RoleName(RoleClient, "eu"); got != "client.eu.berth" {
		t.Fatalf("RoleName = %q", got)
	}
}

func TestServerAndClientConnect(t *testing.T) {
	p := newPKI(t)
	srv := p.store("server", CertOptions{Role: RoleServer}, p, true)
	cli := p.store("client", CertOptions{Role: RoleClient}, p, true)
	other := p.store("server2", CertOptions{Role: RoleServer}, p, true)

	// A client reaches a server's RPC listener; a server its raft peer.
	c, err := dial(serve(t, srv.ServerConfig()), cli.ClientConfig())
	if err != nil {
		t.Fatalf("client → server RPC: %v", err)
	}
	c.Close()
	c, err = dial(serve(t, srv.PeerConfig()), other.ClientConfig())
	if err != nil {
		t.Fatalf("server → server raft: %v", err)
	}
	if !srv.PeerIsServer(c.ConnectionState()) {
		t.Fatal("a server's peer is not seen as a server")
	}
	c.Close()
}

func TestClientCertificateRefusedAsServer(t *testing.T) {
	p := newPKI(t)
	srv := p.store("server", CertOptions{Role: RoleServer}, p, true)
	cli := p.store("client", CertOptions{Role: RoleClient}, p, true)

	// A client certificate cannot complete a handshake with raft's listener.
	_, err := dial(serve(t, srv.PeerConfig()), cli.ClientConfig())
	if err == nil {
		t.Fatal("a client certificate joined the raft listener")
	}
	// A server dialling a "server" that presents a client certificate refuses it.
	_, err = dial(serve(t, cli.ServerConfig()), srv.ClientConfig())
	if !errors.Is(err, ErrPeerRole) {
		t.Fatalf("dialling a client certificate as a server: %v, want ErrPeerRole", err)
	}
	// Without verify_server_hostname, any certificate of the CA will do.
	loose := p.store("loose", CertOptions{Role: RoleServer}, p, false)
	c, err := dial(serve(t, loose.PeerConfig()), cli.ClientConfig())
	if err != nil {
		t.Fatalf("without verify_server_hostname: %v", err)
	}
	c.Close()
}

func TestOtherCARefused(t *testing.T) {
	p := newPKI(t)
	foreign := newPKI(t)
	srv := p.store("server", CertOptions{Role: RoleServer}, p, true)
	// A client certificate of another CA, trusting ours.
	intruder := foreign.store("client", CertOptions{Role: RoleClient}, p, true)

	_, err := dial(serve(t, srv.ServerConfig()), intruder.ClientConfig())
	if err == nil {
		t.Fatal("a certificate of another CA was accepted")
	}
	// And a server of another CA is refused by our client.
	cli := p.store("client", CertOptions{Role: RoleClient}, p, true)
	foreignSrv := foreign.store("server", CertOptions{Role: RoleServer}, foreign, true)
	_, err = dial(serve(t, foreignSrv.ServerConfig()), cli.ClientConfig())
	if !errors.Is(err, ErrUntrustedPeer) {
		t.Fatalf("a server of another CA: %v, want ErrUntrustedPeer", err)
	}
}

func TestExpiredRefused(t *testing.T) {
	p := newPKI(t)
	srv := p.store("server", CertOptions{Role: RoleServer}, p, true)
	cli := p.store("client", CertOptions{Role: RoleClient}, p, true)
	// Certificate expired a day ago: loading it fails, naming the file.
	old, err := NewCert(p.ca, CertOptions{Role: RoleClient, NotBefore: time.Now().Add(-48 * time.Hour), Days: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(Options{CAFile: p.write("ca.pem", p.ca.Cert), CertFile: p.write("old.pem", old.Cert), KeyFile: p.write("old-key.pem", old.Key)})
	if err == nil || !strings.Contains(err.Error(), "old.pem") || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("loading an expired certificate: %v", err)
	}
	// Presented by a peer (its clock moved on after loading), it is refused.
	late := p.store("late", CertOptions{Role: RoleClient}, p, true)
	late.cur.Store(&material{cert: mustPair(t, old), leaf: nil, roots: late.cur.Load().roots})
	if _, err := dial(serve(t, srv.ServerConfig()), late.ClientConfig()); err == nil {
		t.Fatal("an expired client certificate was accepted")
	}
	// A server whose certificate has expired, seen from a client whose
	// clock is two years on.
	cli.opts.Now = func() time.Time { return time.Now().Add(2 * 365 * 24 * time.Hour) }
	if _, err := dial(serve(t, srv.ServerConfig()), cli.ClientConfig()); !errors.Is(err, ErrUntrustedPeer) {
		t.Fatalf("an expired server certificate: %v, want ErrUntrustedPeer", err)
	}
}

func mustPair(t *testing.T, p PEM) *tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(p.Cert, p.Key)
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

func TestLoadErrorsNameTheFile(t *testing.T) {
	p := newPKI(t)
	c, err := NewCert(p.ca, CertOptions{Role: RoleServer})
	if err != nil {
		t.Fatal(err)
	}
	ca, cert, key := p.write("ca.pem", p.ca.Cert), p.write("c.pem", c.Cert), p.write("c-key.pem", c.Key)
	garbage := p.write("garbage.pem", []byte("not pem"))
	// A PEM CERTIFICATE block whose bytes are no certificate: blamed on
	// cert_file, not on the key X509KeyPair cannot pair with it.
	malformed := p.write("malformed.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("not DER")}))
	other := newPKI(t)
	for _, tt := range []struct {
		name string
		opts Options
		want string
	}{
		{"missing ca", Options{CAFile: filepath.Join(p.dir, "nope.pem"), CertFile: cert, KeyFile: key}, "nope.pem"},
		{"garbage ca", Options{CAFile: garbage, CertFile: cert, KeyFile: key}, "ca_file " + garbage},
		{"garbage cert", Options{CAFile: ca, CertFile: garbage, KeyFile: key}, "cert_file " + garbage},
		{"garbage key", Options{CAFile: ca, CertFile: cert, KeyFile: garbage}, "key_file " + garbage},
		{"malformed cert", Options{CAFile: ca, CertFile: malformed, KeyFile: key}, "tls: cert_file " + malformed + ": x509: malformed certificate"},
		{"key of another cert", Options{CAFile: ca, CertFile: cert, KeyFile: p.write("ca-key.pem", p.ca.Key)}, "key_file " + filepath.Join(p.dir, "ca-key.pem") + ": not the key of cert_file " + cert},
		{"other ca", Options{CAFile: p.write("other.pem", other.ca.Cert), CertFile: cert, KeyFile: key}, "does not verify"},
		{"no key file", Options{CAFile: ca, CertFile: cert}, "key_file: required"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: %v, want an error naming %q", err, tt.want)
			}
		})
	}
}

// TestReloadKeepsConnections proves a reload leaves the connections made
// before it working while new ones get the new certificate and CA.
func TestReloadKeepsConnections(t *testing.T) {
	p := newPKI(t)
	srv := p.store("server", CertOptions{Role: RoleServer}, p, true)
	cli := p.store("client", CertOptions{Role: RoleClient}, p, true)
	addr := serve(t, srv.ServerConfig())
	before, err := dial(addr, cli.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	oldSerial := before.ConnectionState().PeerCertificates[0].SerialNumber

	// Rotate to a new CA: new server and client certificates, the files
	// rewritten in place, then Reload.
	next := newPKI(t)
	for _, r := range []struct {
		s    *Store
		role Role
	}{{srv, RoleServer}, {cli, RoleClient}} {
		c, err := NewCert(next.ca, CertOptions{Role: r.role})
		if err != nil {
			t.Fatal(err)
		}
		o := r.s.Options()
		for path, data := range map[string][]byte{o.CAFile: next.ca.Cert, o.CertFile: c.Cert, o.KeyFile: c.Key} {
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.s.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	if err := roundTrip(before); err != nil {
		t.Fatalf("a connection made before the reload broke: %v", err)
	}
	after, err := dial(addr, cli.ClientConfig())
	if err != nil {
		t.Fatalf("a connection after the reload: %v", err)
	}
	defer after.Close()
	if after.ConnectionState().PeerCertificates[0].SerialNumber.Cmp(oldSerial) == 0 {
		t.Fatal("the new connection got the old certificate")
	}
	// The old client certificate is no longer trusted.
	stale := p.store("stale", CertOptions{Role: RoleClient}, p, true)
	if _, err := dial(addr, stale.ClientConfig()); err == nil {
		t.Fatal("a certificate of the old CA was accepted after the reload")
	}
	// A reload of broken files keeps what works.
	if err := os.WriteFile(srv.Options().CertFile, []byte("broken"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := srv.Reload(); err == nil {
		t.Fatal("reloading a broken certificate succeeded")
	}
	c, err := dial(addr, cli.ClientConfig())
	if err != nil {
		t.Fatalf("after a failed reload: %v", err)
	}
	c.Close()
}

func TestHTTPConfigClientCertificate(t *testing.T) {
	p := newPKI(t)
	srv := p.store("server", CertOptions{Role: RoleServer}, p, true)
	cliCert := p.store("cli", CertOptions{Role: RoleCLI}, p, true)
	addr := serve(t, srv.HTTPConfig())
	roots := p.roots()
	// No client certificate: refused.
	if _, err := dial(addr, &tls.Config{RootCAs: roots, ServerName: "localhost"}); err == nil {
		t.Fatal("HTTPS without a client certificate was accepted under verify_https_client")
	}
	// The CLI's certificate: accepted, and the server's name checks out
	// for localhost as it would for the CLI.
	pair := cliCert.cur.Load().cert
	c, err := dial(addr, &tls.Config{RootCAs: roots, ServerName: "localhost", Certificates: []tls.Certificate{*pair}})
	if err != nil {
		t.Fatalf("HTTPS with the CLI's certificate: %v", err)
	}
	c.Close()
}

// TestOwnCertificateRole: with verify_server_hostname an agent's own
// certificate must name the role it runs as in its region, at load and at
// reload (which keeps the material it had).
func TestOwnCertificateRole(t *testing.T) {
	p := newPKI(t)
	ca := p.write("ca.pem", p.ca.Cert)
	pair := func(name string, opts CertOptions) (cert, key string) {
		c, err := NewCert(p.ca, opts)
		if err != nil {
			t.Fatal(err)
		}
		return p.write(name+".pem", c.Cert), p.write(name+"-key.pem", c.Key)
	}
	srvCert, srvKey := pair("server", CertOptions{Role: RoleServer})
	cliCert, cliKey := pair("client", CertOptions{Role: RoleClient})
	euCert, euKey := pair("server-eu", CertOptions{Role: RoleServer, Region: "eu"})
	for _, tt := range []struct {
		name       string
		role       Role
		region     string
		cert, key  string
		verify     bool
		wantRefuse bool
	}{
		{"server with a server certificate", RoleServer, "", srvCert, srvKey, true, false},
		{"client with a client certificate", RoleClient, "", cliCert, cliKey, true, false},
		{"server with a client certificate", RoleServer, "", cliCert, cliKey, true, true},
		{"client with a server certificate", RoleClient, "", srvCert, srvKey, true, true},
		{"server of another region", RoleServer, "", euCert, euKey, true, true},
		{"server of its region", RoleServer, "eu", euCert, euKey, true, false},
		{"no verify_server_hostname", RoleServer, "", cliCert, cliKey, false, false},
		{"no role (the CLI)", "", "", cliCert, cliKey, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(Options{CAFile: ca, CertFile: tt.cert, KeyFile: tt.key, Region: tt.region, Role: tt.role, VerifyServerHostname: tt.verify})
			if !tt.wantRefuse {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var fe *FileError
			if !errors.Is(err, ErrOwnRole) || !errors.As(err, &fe) || fe.Key != "cert_file" || !strings.Contains(err.Error(), RoleName(tt.role, tt.region)) {
				t.Fatalf("New: %v, want ErrOwnRole at cert_file naming %s", err, RoleName(tt.role, tt.region))
			}
		})
	}

	// Reload to a client certificate on a server: refused, the server
	// certificate stays.
	cert, key := pair("rotated", CertOptions{Role: RoleServer})
	s, err := New(Options{CAFile: ca, CertFile: cert, KeyFile: key, Role: RoleServer, VerifyServerHostname: true})
	if err != nil {
		t.Fatal(err)
	}
	serial := s.Leaf().SerialNumber
	for from, to := range map[string]string{cliCert: cert, cliKey: key} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Reload(); !errors.Is(err, ErrOwnRole) {
		t.Fatalf("Reload to a client certificate: %v, want ErrOwnRole", err)
	}
	if s.Leaf().SerialNumber.Cmp(serial) != 0 || !HasRole(s.Leaf(), RoleServer, "") {
		t.Fatal("a refused reload replaced the server certificate")
	}
}
