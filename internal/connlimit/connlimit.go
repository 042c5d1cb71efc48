// Package connlimit wraps a net.Listener with the agent's per-client limits
// (agent config limits { … }): at most MaxPerIP open connections from one
// remote IP — a connection past it is closed at once, logged once per IP
// per LogInterval and counted — and, with HandshakeTimeout, a connection
// that sends nothing within it is closed.
package connlimit

import (
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	metrics "github.com/hashicorp/go-metrics/compat"

	"berth.dev/berth/internal/clock"
)

// DefaultLogInterval spaces the log lines about one IP's refused
// connections.
const DefaultLogInterval = time.Minute

// Config is a listener's limits.
type Config struct {
	// Name names the listener in logs and metrics ("http", "rpc").
	Name string
	// MaxPerIP bounds the open connections from one remote IP; 0 is no
	// bound.
	MaxPerIP int
	// HandshakeTimeout closes a connection that sends nothing within it
	// (its first read times out); 0 is no timeout.
	HandshakeTimeout time.Duration
	// LogInterval spaces the log lines per IP; 0 is DefaultLogInterval.
	LogInterval time.Duration
	Logger      hclog.Logger
	// Clock times the log interval (socket deadlines are the kernel's,
	// in real time).
	Clock clock.Clock
}

// Listener is a net.Listener that enforces Config.
type Listener struct {
	net.Listener
	cfg     Config
	refused atomic.Uint64

	mu     sync.Mutex
	open   map[string]int
	logged map[string]time.Time
}

// Wrap returns l enforcing cfg.
func Wrap(l net.Listener, cfg Config) *Listener {
	if cfg.LogInterval <= 0 {
		cfg.LogInterval = DefaultLogInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	return &Listener{Listener: l, cfg: cfg, open: map[string]int{}, logged: map[string]time.Time{}}
}

// Refused is the number of connections closed for their IP's limit.
func (l *Listener) Refused() uint64 { return l.refused.Load() }

// Open is the number of connections open from ip.
func (l *Listener) Open(ip string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open[ip]
}

// Accept returns the next connection within the limits; connections past
// their IP's limit are closed here and never returned.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := remoteIP(c.RemoteAddr())
		if !l.acquire(ip) {
			l.refuse(ip)
			_ = c.Close()
			continue
		}
		wc := &conn{Conn: c, release: sync.OnceFunc(func() { l.release(ip) })}
		if d := l.cfg.HandshakeTimeout; d > 0 {
			if err := wc.startHandshake(time.Now().Add(d)); err != nil {
				_ = wc.Close()
				continue
			}
		}
		return wc, nil
	}
}

func (l *Listener) acquire(ip string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cfg.MaxPerIP > 0 && l.open[ip] >= l.cfg.MaxPerIP {
		return false
	}
	l.open[ip]++
	return true
}

func (l *Listener) release(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[ip]--; l.open[ip] <= 0 {
		delete(l.open, ip)
	}
}

// refuse counts a refused connection and logs it unless ip was logged
// within the interval.
func (l *Listener) refuse(ip string) {
	l.refused.Add(1)
	metrics.IncrCounterWithLabels([]string{"berth", "limits", "conns_refused"}, 1, []metrics.Label{{Name: "listener", Value: l.cfg.Name}})
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	last, seen := l.logged[ip]
	log := !seen || now.Sub(last) >= l.cfg.LogInterval
	if log {
		l.logged[ip] = now
		for other, at := range l.logged {
			if now.Sub(at) >= l.cfg.LogInterval && other != ip {
				delete(l.logged, other)
			}
		}
	}
	l.mu.Unlock()
	if log {
		l.cfg.Logger.Warn("connection refused: too many connections from this client IP (limits."+l.cfg.Name+"_max_conns_per_client); further refusals of this IP are counted, logged again after the interval",
			"listener", l.cfg.Name, "client_ip", ip, "max_conns_per_client", l.cfg.MaxPerIP, "interval", l.cfg.LogInterval)
	}
}

// remoteIP is the IP of a remote address ("" groups addresses without
// one, such as a unix socket's).
func remoteIP(a net.Addr) string {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.IP.String()
	case nil:
		return ""
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// conn releases its IP's slot when closed and enforces the handshake
// timeout: until the first bytes are read, its read deadline is the
// earlier of the handshake's and the one the server asked for (gRPC sets
// its own connection timeout on the raw connection); then the server's.
type conn struct {
	net.Conn
	release func()

	mu        sync.Mutex
	handshake time.Time // zero once the handshake is over
	asked     time.Time // the read deadline the server last set
}

func (c *conn) startHandshake(deadline time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.handshake = deadline
	return c.Conn.SetReadDeadline(deadline)
}

func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	inHandshake := !c.handshake.IsZero()
	if inHandshake && n > 0 {
		c.handshake = time.Time{}
		_ = c.Conn.SetReadDeadline(c.asked)
	}
	c.mu.Unlock()
	if inHandshake && n == 0 && errors.Is(err, os.ErrDeadlineExceeded) {
		// Sent nothing within the handshake timeout: closed.
		_ = c.Close()
	}
	return n, err
}

func (c *conn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.SetReadDeadline(t)
}

func (c *conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asked = t
	if !c.handshake.IsZero() && (t.IsZero() || c.handshake.Before(t)) {
		t = c.handshake
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *conn) Close() error {
	c.release()
	return c.Conn.Close()
}
