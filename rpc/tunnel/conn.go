package tunnel

import (
	"io"
	"net"
	"sync"

	"berth.dev/berth/rpc/pb"
)

// maxFrame bounds the bytes one TunnelFrame carries. yamux writes a 12-byte
// header and then a body of up to its stream window (256 KiB by default);
// smaller frames keep each gRPC message well inside the outer stream's
// HTTP/2 flow-control window, so one large body does not stall a keepalive
// queued behind it for a whole window round trip.
const maxFrame = 32 << 10

// frameStream is the part of both ends of a Tunnel.Open stream the
// connection uses.
type frameStream interface {
	Send(*pb.TunnelFrame) error
	Recv() (*pb.TunnelFrame, error)
}

// streamConn is the byte stream yamux runs over: Read returns the frames'
// bytes in order, Write sends frames. yamux needs only an
// io.ReadWriteCloser (it has its own write timeout and keepalive and never
// sets deadlines on its connection), so this is not a net.Conn with
// deadlines it could not honour; it reports addresses so the yamux streams
// name the peer.
//
// Frames are received by a goroutine of their own, so Close unblocks a
// Read at once: on a server a gRPC stream's Recv returns only when its
// handler does, and yamux's Close waits for its reader to return.
type streamConn struct {
	s      frameStream
	local  net.Addr
	remote net.Addr

	frames chan []byte
	// recvErr is the error that ended receiving; set before frames closes.
	recvErr error
	rbuf    []byte // the rest of the last received frame; only Read uses it

	wmu sync.Mutex // Send is not safe for concurrent use

	closed    chan struct{}
	closeOnce sync.Once
	onClose   func()
}

var _ io.ReadWriteCloser = (*streamConn)(nil)

func newStreamConn(s frameStream, local, remote net.Addr, onClose func()) *streamConn {
	c := &streamConn{s: s, local: local, remote: remote, frames: make(chan []byte), closed: make(chan struct{}), onClose: onClose}
	go c.receive()
	return c
}

// receive hands the received frames to Read until the stream ends or the
// connection is closed.
func (c *streamConn) receive() {
	defer close(c.frames)
	for {
		f, err := c.s.Recv()
		if err != nil {
			c.recvErr = err
			return
		}
		if len(f.GetData()) == 0 {
			continue
		}
		select {
		case c.frames <- f.GetData():
		case <-c.closed:
			c.recvErr = net.ErrClosed
			return
		}
	}
}

func (c *streamConn) Read(p []byte) (int, error) {
	if len(c.rbuf) == 0 {
		select {
		case data, ok := <-c.frames:
			if !ok {
				return 0, c.recvErr
			}
			c.rbuf = data
		case <-c.closed:
			return 0, net.ErrClosed
		}
	}
	n := copy(p, c.rbuf)
	c.rbuf = c.rbuf[n:]
	return n, nil
}

func (c *streamConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	written := 0
	for len(p) > 0 {
		select {
		case <-c.closed:
			return written, net.ErrClosed
		default:
		}
		chunk := p[:min(len(p), maxFrame)]
		// SendMsg encodes the message before it returns, so p may be
		// reused by the caller afterwards.
		if err := c.s.Send(&pb.TunnelFrame{Data: chunk}); err != nil {
			return written, err
		}
		written += len(chunk)
		p = p[len(chunk):]
	}
	return written, nil
}

// Close ends the stream (onClose cancels it on the client's side and lets
// the handler return on the server's); a blocked Read fails at once, a
// blocked Write once the stream has ended.
func (c *streamConn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.onClose()
	})
	return nil
}

// LocalAddr and RemoteAddr are found by yamux through an interface check.
func (c *streamConn) LocalAddr() net.Addr  { return c.local }
func (c *streamConn) RemoteAddr() net.Addr { return c.remote }

// addr names one end of a tunnel.
type addr string

func (a addr) Network() string { return "berth-tunnel" }
func (a addr) String() string  { return string(a) }
