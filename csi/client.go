package csi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Client talks to one CSI plugin. Its three service clients share one
// connection; a plugin that serves only some services still gets all three,
// and calls to a missing service fail with codes.Unimplemented.
type Client struct {
	Identity   *IdentityClient
	Controller *ControllerClient
	Node       *NodeClient

	conn *grpc.ClientConn // nil when the caller owns the connection
	// cc is what every call goes over (conn, or the caller's).
	cc grpc.ClientConnInterface
}

// Option configures a client.
type Option func(*caller)

// WithLogger sets the logger for call and error lines. Requests are logged,
// with secrets redacted, only at trace level.
func WithLogger(l hclog.Logger) Option {
	return func(c *caller) {
		if l != nil {
			c.logger = l
		}
	}
}

// WithTimeouts overrides the deadlines of the calls it names; the others
// keep their DefaultTimeouts value. A zero or negative duration does not
// remove the deadline: no call is made without one, so it falls back to two
// minutes.
func WithTimeouts(t Timeouts) Option {
	return func(c *caller) {
		for call, d := range t {
			c.timeouts[call] = d
		}
	}
}

// WithShutdownCheck sets how the client tells a dead plugin from a plugin
// that is briefly unreachable, for connections made with New (Dial checks
// the socket itself). After a call fails with codes.Unavailable the client
// calls check; a non-nil result, saying why the plugin is considered gone
// (for example that its process has exited), turns the error into
// ErrPluginShutdown.
func WithShutdownCheck(check func() error) Option {
	return func(c *caller) { c.gone = check }
}

// maxSocketPath is the longest path sockaddr_un holds with its terminating NUL.
const maxSocketPath = 107

// ParseEndpoint returns the socket path of a CSI endpoint written either as
// "unix:///abs/path", "unix:/abs/path" or "/abs/path" (the forms CSI_ENDPOINT
// takes in the wild). Other schemes, relative paths and paths too long for a
// unix socket are rejected with ErrInvalidEndpoint.
func ParseEndpoint(endpoint string) (string, error) {
	path := endpoint
	switch {
	case strings.HasPrefix(endpoint, "unix://"):
		path = strings.TrimPrefix(endpoint, "unix://")
	case strings.HasPrefix(endpoint, "unix:"):
		path = strings.TrimPrefix(endpoint, "unix:")
	case strings.Contains(endpoint, "://"):
		return "", fmt.Errorf("%w %q: only unix sockets are supported (unix:///path or /path)", ErrInvalidEndpoint, endpoint)
	}
	switch {
	case path == "":
		return "", fmt.Errorf("%w %q: no socket path", ErrInvalidEndpoint, endpoint)
	case !filepath.IsAbs(path):
		return "", fmt.Errorf("%w %q: socket path %q is not absolute", ErrInvalidEndpoint, endpoint, path)
	case strings.ContainsRune(path, 0):
		return "", fmt.Errorf("%w %q: socket path contains a NUL byte", ErrInvalidEndpoint, endpoint)
	case len(path) > maxSocketPath:
		return "", fmt.Errorf("%w %q: socket path is %d bytes, longer than the %d a unix socket allows", ErrInvalidEndpoint, endpoint, len(path), maxSocketPath)
	}
	return filepath.Clean(path), nil
}

// Dial returns a client for the plugin listening on a unix socket endpoint
// (see ParseEndpoint). It does not wait for the plugin: the connection is made
// by the first call, and reconnects quickly after a plugin restart. A call
// made while the socket is gone or refuses connections fails at once with
// ErrPluginShutdown. Close releases the connection.
func Dial(endpoint string, opts ...Option) (*Client, error) {
	path, err := ParseEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	dialer := func(ctx context.Context, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}
	cc, err := grpc.NewClient("passthrough:///csi.sock",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(dialer),
		grpc.WithAuthority("localhost"),
		// gRPC's default reconnect backoff grows to two minutes; a local
		// plugin that restarts should be reachable again within a second.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrInvalidEndpoint, endpoint, err)
	}
	opts = append([]Option{WithShutdownCheck(func() error { return socketGone(path) })}, opts...)
	c := New(cc, opts...)
	c.conn = cc
	return c, nil
}

// New returns a client over a connection the caller made and owns (Close
// does not close it).
func New(cc grpc.ClientConnInterface, opts ...Option) *Client {
	c := &caller{logger: hclog.NewNullLogger(), timeouts: DefaultTimeouts()}
	for _, o := range opts {
		o(c)
	}
	return &Client{
		Identity:   &IdentityClient{c: c, rpc: csipb.NewIdentityClient(cc)},
		Controller: &ControllerClient{c: c, rpc: csipb.NewControllerClient(cc)},
		Node:       &NodeClient{c: c, rpc: csipb.NewNodeClient(cc)},
		cc:         cc,
	}
}

// Close closes the connection Dial made; it does nothing for New.
func (c *Client) Close() error {
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

// socketGone reports why nothing serves the socket at path, or nil when a
// connection is accepted. Only a missing socket or a refused connection count:
// anything else (a full backlog, say) means a live but busy plugin.
func socketGone(path string) error {
	d := net.Dialer{Timeout: time.Second}
	nc, err := d.Dial("unix", path)
	if err == nil {
		_ = nc.Close()
		return nil
	}
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
		return err
	}
	return nil
}

// caller is what the three service clients share: deadlines, logging and the
// translation of gRPC errors into *Error.
type caller struct {
	logger   hclog.Logger
	timeouts Timeouts
	gone     func() error
	// noMetrics: WithoutCallMetrics.
	noMetrics bool
}

// invoke makes one call with its deadline and turns a failure into *Error.
func invoke[Req, Resp proto.Message](ctx context.Context, c *caller, call Call, volumeID string, req Req,
	rpc func(context.Context, Req, ...grpc.CallOption) (Resp, error)) (Resp, error) {
	// A caller's deadline sooner than the call's own already bounds it; not
	// deriving a context then saves a timer per call in retry loops.
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > c.timeouts.of(call) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeouts.of(call))
		defer cancel()
	}
	if c.logger.IsTrace() {
		c.logger.Trace("csi call", "call", call, "volume", volumeID, "request", RedactedString(req))
	}
	start := time.Now()
	resp, err := rpc(ctx, req)
	code := status.Code(err)
	c.observeCall(call, code, start, err != nil && (code != codes.NotFound || !call.NotFoundIsSuccess()))
	if err != nil {
		if code == codes.NotFound && call.NotFoundIsSuccess() {
			// The call is to undo something, and the plugin says it is
			// not there: done (the call table's NotFoundIsSuccess).
			c.logger.Debug("csi call found nothing to undo, treating as done", "call", call, "volume", volumeID)
			return resp.ProtoReflect().Type().New().Interface().(Resp), nil
		}
		var zero Resp
		return zero, c.fail(call, volumeID, req, err)
	}
	return resp, nil
}

// fail builds the *Error for a failed call: the code decides the class, the
// message loses any secret the plugin echoed, and an Unavailable from a plugin
// whose socket is gone becomes ErrPluginShutdown.
func (c *caller) fail(call Call, volumeID string, req proto.Message, err error) error {
	st := status.Convert(err)
	e := &Error{Call: call, VolumeID: volumeID, Code: st.Code(), Message: scrubSecrets(st.Message(), req)}
	if e.Code == codes.Unavailable && c.gone != nil {
		if why := c.gone(); why != nil {
			e.Err = fmt.Errorf("%w: %w", ErrPluginShutdown, why)
		}
	}
	if e.Code == codes.FailedPrecondition && InstanceChanged(err) {
		// A node refused a call addressed to another instance than the
		// one serving there now (forwarded calls): no plugin was called.
		e.Err = fmt.Errorf("%w: %s", ErrControllerInstanceChanged, e.Message)
	}
	c.logger.Debug("csi call failed", "call", call, "volume", volumeID, "code", e.Code, "error", e.Error())
	return e
}

// invalidResponse reports a response that breaks the spec.
func invalidResponse(call Call, volumeID, format string, args ...any) error {
	return &Error{Call: call, VolumeID: volumeID, Code: codes.Internal,
		Err: fmt.Errorf("%w: "+format, append([]any{ErrInvalidResponse}, args...)...)}
}

// required checks the fields the spec requires of a request, so a bad request
// is refused with the names of what is missing instead of reaching the plugin.
func required(call Call, volumeID string, fields ...field) error {
	var missing []string
	for _, f := range fields {
		if !f.set {
			missing = append(missing, f.name)
		}
	}
	if missing == nil {
		return nil
	}
	return &Error{Call: call, VolumeID: volumeID, Code: codes.InvalidArgument,
		Err: fmt.Errorf("%w: missing %s", ErrInvalidRequest, strings.Join(missing, ", "))}
}

type field struct {
	name string
	set  bool
}
