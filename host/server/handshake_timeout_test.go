package server

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"berth.dev/berth/internal/tlsconf"
)

// A connection that starts its TLS handshake and stalls (the listener's
// first-byte limit, internal/connlimit, has already let it through) is
// closed after RPCHandshakeTimeout, not gRPC's 120 s.
func TestStalledTLSHandshakeIsClosed(t *testing.T) {
	ca, err := tlsconf.NewCA(tlsconf.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tc := newTestCluster(t, 1, func(c *testConfig) {
		c.TLS = pkiStore(t, ca, tlsconf.RoleServer)
		c.RPCHandshakeTimeout = 200 * time.Millisecond
	})
	s := tc.servers[0]
	conn, err := net.Dial("tcp", s.cfg.RPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A TLS handshake record header announcing 80 bytes, then nothing.
	if _, err := conn.Write([]byte{0x16, 0x03, 0x01, 0x00, 0x50}); err != nil {
		t.Fatal(err)
	}
	const bound = 20 * time.Second
	if err := conn.SetReadDeadline(time.Now().Add(bound)); err != nil {
		t.Fatal(err)
	}
	_, err = conn.Read(make([]byte, 1))
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a stalled TLS handshake is still open after %s: read %v", bound, err)
	}
}
