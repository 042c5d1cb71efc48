package adapters

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/rpc/errcode"
)

// Handle is one adapter of the manager, valid for the manager's life: its
// connection follows the adapter's restarts.
type Handle struct {
	in *instance
}

// Name is the adapter's catalog name.
func (h *Handle) Name() string { return h.in.a.Name }

// Builtin reports whether the adapter ships in the berth binary.
func (h *Handle) Builtin() bool { return h.in.a.Builtin }

// Path is the adapter's executable (the berth binary for a built-in one).
func (h *Handle) Path() string { return h.in.a.Path }

// State returns the adapter's current condition.
func (h *Handle) State() State { return h.in.currentState() }

// Conn returns a connection to the adapter's CSI services for
// csi.New(conn): every call goes to the adapter process running at the
// time, waiting (until the call's deadline) for one to be started when
// none runs. A call that finds the process gone fails with Unavailable,
// which CSI clients retry as uncertain, and makes the next call wait for
// the restarted process.
func (h *Handle) Conn() grpc.ClientConnInterface { return followConn{h.in} }

// followConn is Handle.Conn.
type followConn struct{ in *instance }

var _ grpc.ClientConnInterface = followConn{}

func (c followConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	r, err := c.in.sup.Acquire(ctx, true)
	if err != nil {
		return asStatus(err)
	}
	err = r.Val.Invoke(ctx, method, args, reply, opts...)
	c.check(r, err)
	return err
}

func (c followConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	r, err := c.in.sup.Acquire(ctx, true)
	if err != nil {
		return nil, asStatus(err)
	}
	s, err := r.Val.NewStream(ctx, desc, method, opts...)
	c.check(r, err)
	return s, err
}

// check reports r gone when a call failed Unavailable and its process has
// exited, so the restart does not wait for the next probe.
func (c followConn) check(r *running, err error) {
	if status.Code(err) == codes.Unavailable && r.Proc.Exited() {
		c.in.sup.Gone(r)
	}
}

// asStatus gives a manager error the gRPC status its sentinel carries,
// with the whole message, as a CSI client classifies errors by code.
func asStatus(err error) error { return status.Error(errcode.Code(err), err.Error()) }
