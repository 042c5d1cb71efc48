package server

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/raft"

	"berth.dev/berth/internal/tlsconf"
)

// pipeListener hands Accept the far ends of the pipes its dial makes.
type pipeListener struct {
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	near, far := net.Pipe()
	select {
	case l.conns <- far:
		return near, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

// TestTLSStreamLayerConnOutlivesHandshakeTimeout: raft pools the stream
// layer's connections and pipelines on them for as long as they live, so
// neither the accepted nor the dialled one may keep the handshake's
// timeout as a deadline: both still carry bytes long after it passed.
func TestTLSStreamLayerConnOutlivesHandshakeTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Made in the bubble: valid from its clock's start.
		ca, err := tlsconf.NewCA(tlsconf.CAOptions{})
		if err != nil {
			t.Fatal(err)
		}
		srv, other := pkiStore(t, ca, tlsconf.RoleServer), pkiStore(t, ca, tlsconf.RoleServer)
		const timeout = 100 * time.Millisecond
		lis := newPipeListener()
		layer := &tlsStreamLayer{tcp: lis, addr: lis.Addr(), store: srv, handshakeTimeout: timeout, dialContext: lis.dial}
		defer layer.Close()
		dialer := &tlsStreamLayer{tcp: newPipeListener(), store: other, handshakeTimeout: timeout, dialContext: lis.dial}

		// The accepting side echoes what it reads until the connection
		// closes.
		served := make(chan error, 1)
		go func() {
			c, err := layer.Accept()
			if err != nil {
				served <- err
				return
			}
			defer c.Close()
			buf := make([]byte, 4)
			for {
				if _, err := io.ReadFull(c, buf); err != nil {
					if err == io.EOF {
						err = nil
					}
					served <- err
					return
				}
				if _, err := c.Write(buf); err != nil {
					served <- err
					return
				}
			}
		}()

		c, err := dialer.Dial(raft.ServerAddress(layer.Addr().String()), timeout)
		if err != nil {
			t.Fatal(err)
		}
		echo := func(msg string) {
			t.Helper()
			// Written apart from the read: net.Pipe is unbuffered and the
			// server's session tickets arrive first.
			wrote := make(chan error, 1)
			go func() { _, err := c.Write([]byte(msg)); wrote <- err }()
			buf := make([]byte, len(msg))
			if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
				c.Close() // unblocks the writer and the accepting side
				<-wrote
				t.Fatalf("echo of %q: %q, %v", msg, buf, err)
			}
			if err := <-wrote; err != nil {
				t.Fatalf("writing %q: %v", msg, err)
			}
		}
		echo("ping")
		time.Sleep(10 * timeout) // the bubble's clock: past both handshakes' timeouts
		echo("pong")
		time.Sleep(10 * timeout)
		echo("ping")
		c.Close()
		if err := <-served; err != nil {
			t.Fatalf("accepting side: %v", err)
		}
	})
}
