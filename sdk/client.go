package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/sdk/driverpb"
)

// DriverClient is a Driver in another process, reached over the go-plugin
// gRPC connection. Get one from LaunchDriver or DispenseDriver. Its errors
// are *RPCError values that unwrap to the sentinel the plugin returned, to
// ErrPluginShutdown when the plugin is gone, or to ctx's error when the
// caller gave up. It is safe for concurrent use.
type DriverClient struct {
	rpc  driverpb.DriverClient
	proc pluginWatch

	mu         sync.RWMutex
	name       string
	apiVersion uint32
	version    string
}

var (
	_ Driver      = (*DriverClient)(nil)
	_ ExecDriver  = (*DriverClient)(nil)
	_ StatsDriver = (*DriverClient)(nil)
)

// newDriverClient returns a client for conn; done is closed when the
// plugin process exits, nil when no process is watched.
func newDriverClient(conn grpc.ClientConnInterface, done <-chan struct{}) *DriverClient {
	return &DriverClient{rpc: driverpb.NewDriverClient(conn), proc: pluginWatch{done: done, grace: defaultExitGrace}, name: "(unnegotiated)"}
}

// Name is the plugin's name as it reported it in Negotiate.
func (c *DriverClient) Name() string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.name
}

// APIVersion is the API version negotiated with the plugin.
func (c *DriverClient) APIVersion() uint32 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.apiVersion
}

// Exited reports whether the plugin process is known to have exited.
func (c *DriverClient) Exited() bool { return c.proc.exited() }

func (c *DriverClient) err(ctx context.Context, method string, err error) error {
	return fromStatus(ctx, c.Name(), method, c.proc, err)
}

// negotiate agrees on an API version; DispenseDriver calls it.
func (c *DriverClient) negotiate(ctx context.Context) error {
	resp, err := c.rpc.Negotiate(ctx, &driverpb.NegotiateRequest{ApiVersions: supportedAPIVersions()})
	if err != nil {
		return c.err(ctx, "Negotiate", err)
	}
	if _, ok := pickAPIVersion([]uint32{resp.GetApiVersion()}); !ok {
		return &RPCError{Plugin: resp.GetInfo().GetName(), Method: "Negotiate", Code: codes.FailedPrecondition, Err: ErrIncompatibleAPI,
			Message: "plugin chose an API version this sdk does not speak"}
	}
	c.mu.Lock()
	c.name, c.apiVersion, c.version = resp.GetInfo().GetName(), resp.GetApiVersion(), resp.GetInfo().GetVersion()
	c.mu.Unlock()
	return nil
}

// PluginInfo returns the name and version the plugin reported in Negotiate.
func (c *DriverClient) PluginInfo(context.Context) (*driverpb.PluginInfo, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return &driverpb.PluginInfo{Name: c.name, Version: c.version}, nil
}

// Capabilities implements Driver.
func (c *DriverClient) Capabilities(ctx context.Context) (*driverpb.DriverCapabilities, error) {
	caps, err := c.rpc.Capabilities(ctx, &driverpb.CapabilitiesRequest{})
	return caps, c.err(ctx, "Capabilities", err)
}

// ConfigSchema implements Driver; schemas the plugin sends are checked with
// CheckSchema so a broken plugin is caught before its schema is used.
func (c *DriverClient) ConfigSchema(ctx context.Context) (*driverpb.ConfigSchemas, error) {
	s, err := c.rpc.ConfigSchema(ctx, &driverpb.ConfigSchemaRequest{})
	if err != nil {
		return nil, c.err(ctx, "ConfigSchema", err)
	}
	if err := errors.Join(CheckSchema(s.GetPlugin()), CheckSchema(s.GetTask())); err != nil {
		// The call succeeded, but the plugin answered against the protocol:
		// its bug, Internal.
		return nil, &RPCError{Plugin: c.Name(), Method: "ConfigSchema", Code: codes.Internal, Message: "plugin sent an invalid schema: " + err.Error()}
	}
	return s, nil
}

// SetConfig implements Driver.
func (c *DriverClient) SetConfig(ctx context.Context, cfg *driverpb.PluginConfig) error {
	_, err := c.rpc.SetConfig(ctx, cfg)
	return c.err(ctx, "SetConfig", err)
}

// Fingerprint implements Driver.
func (c *DriverClient) Fingerprint(ctx context.Context) iter.Seq2[*driverpb.DriverFingerprint, error] {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.rpc.Fingerprint(ctx, &driverpb.FingerprintRequest{})
	return recvAll(ctx, cancel, "Fingerprint", c, stream, err)
}

// StartTask implements Driver.
//
// A task with mounts is refused (ErrNotSupported) before it is sent to a
// plugin that negotiated an API older than APIVersionMounts: such a plugin
// would run the task and drop its mounts. Whether the driver honours mounts
// at all is its capabilities' say (see MountsSupported), which callers
// check for the clearer message. A request over LegacyMaxMessageSize is
// refused (ErrRequestTooLarge) before it is sent to a plugin that
// negotiated an API older than APIVersionLargeMessages.
func (c *DriverClient) StartTask(ctx context.Context, cfg *driverpb.TaskConfig) (*driverpb.TaskHandle, error) {
	if n := len(cfg.GetMounts()); n > 0 {
		if v := c.APIVersion(); v < APIVersionMounts {
			return nil, &RPCError{Plugin: c.Name(), Method: "StartTask", Code: codes.Unimplemented, Err: ErrNotSupported,
				Message: fmt.Sprintf("task %s has %d mount(s), but the plugin speaks driver API %d and mounts need %d", cfg.GetId(), n, v, APIVersionMounts)}
		}
	}
	if v := c.APIVersion(); v < APIVersionLargeMessages {
		if n := proto.Size(cfg); n > LegacyMaxMessageSize {
			return nil, &RPCError{Plugin: c.Name(), Method: "StartTask", Code: codes.ResourceExhausted, Err: ErrRequestTooLarge,
				Message: fmt.Sprintf("task %s's start request is %d bytes, over the %d bytes a plugin speaking driver API %d may take; requests up to %d bytes need a plugin built with a berth sdk speaking API %d or later",
					cfg.GetId(), n, LegacyMaxMessageSize, v, driverpb.MaxMessageSize, APIVersionLargeMessages)}
		}
	}
	h, err := c.rpc.StartTask(ctx, cfg)
	return h, c.err(ctx, "StartTask", err)
}

// WaitTask implements Driver.
func (c *DriverClient) WaitTask(ctx context.Context, taskID string) (*driverpb.ExitResult, error) {
	res, err := c.rpc.WaitTask(ctx, &driverpb.WaitTaskRequest{TaskId: taskID})
	return res, c.err(ctx, "WaitTask", err)
}

// StopTask implements Driver.
func (c *DriverClient) StopTask(ctx context.Context, taskID string, timeout time.Duration, signal string) error {
	_, err := c.rpc.StopTask(ctx, &driverpb.StopTaskRequest{TaskId: taskID, TimeoutNanos: int64(timeout), Signal: signal})
	return c.err(ctx, "StopTask", err)
}

// DestroyTask implements Driver.
func (c *DriverClient) DestroyTask(ctx context.Context, taskID string, force bool) error {
	_, err := c.rpc.DestroyTask(ctx, &driverpb.DestroyTaskRequest{TaskId: taskID, Force: force})
	return c.err(ctx, "DestroyTask", err)
}

// InspectTask implements Driver.
func (c *DriverClient) InspectTask(ctx context.Context, taskID string) (*driverpb.TaskStatus, error) {
	st, err := c.rpc.InspectTask(ctx, &driverpb.InspectTaskRequest{TaskId: taskID})
	return st, c.err(ctx, "InspectTask", err)
}

// RecoverTask implements Driver.
func (c *DriverClient) RecoverTask(ctx context.Context, handle *driverpb.TaskHandle) error {
	_, err := c.rpc.RecoverTask(ctx, &driverpb.RecoverTaskRequest{Handle: handle})
	return c.err(ctx, "RecoverTask", err)
}

// SignalTask implements Driver.
func (c *DriverClient) SignalTask(ctx context.Context, taskID, signal string) error {
	_, err := c.rpc.SignalTask(ctx, &driverpb.SignalTaskRequest{TaskId: taskID, Signal: signal})
	return c.err(ctx, "SignalTask", err)
}

// TaskEvents implements Driver. When it returns, the plugin has subscribed:
// events for anything the caller does afterwards are delivered.
func (c *DriverClient) TaskEvents(ctx context.Context) iter.Seq2[*driverpb.TaskEvent, error] {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.rpc.TaskEvents(ctx, &driverpb.TaskEventsRequest{})
	if err == nil {
		_, err = stream.Header()
	}
	return recvAll(ctx, cancel, "TaskEvents", c, stream, err)
}

// ExecTask implements ExecDriver; ErrNotSupported without the capability.
func (c *DriverClient) ExecTask(ctx context.Context, taskID string, command []string, timeout time.Duration) (*driverpb.ExecResult, error) {
	res, err := c.rpc.ExecTask(ctx, &driverpb.ExecTaskRequest{TaskId: taskID, Command: command, TimeoutNanos: int64(timeout)})
	return res, c.err(ctx, "ExecTask", err)
}

// TaskStats implements StatsDriver; ErrNotSupported without the capability.
func (c *DriverClient) TaskStats(ctx context.Context, taskID string, interval time.Duration) iter.Seq2[*driverpb.TaskResourceUsage, error] {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.rpc.TaskStats(ctx, &driverpb.TaskStatsRequest{TaskId: taskID, IntervalNanos: int64(interval)})
	return recvAll(ctx, cancel, "TaskStats", c, stream, err)
}

// recvAll turns a server stream into an iterator that ends with the
// stream: cleanly at EOF, with a mapped error otherwise. cancel releases
// the stream when the caller stops early or the iterator is never used
// and ctx ends.
func recvAll[T any](ctx context.Context, cancel context.CancelFunc, method string, c *DriverClient,
	stream grpc.ServerStreamingClient[T], openErr error) iter.Seq2[*T, error] {
	return func(yield func(*T, error) bool) {
		defer cancel()
		if openErr != nil {
			yield(nil, c.err(ctx, method, openErr))
			return
		}
		for {
			msg, err := stream.Recv()
			if err == io.EOF {
				return
			}
			if err != nil {
				yield(nil, c.err(ctx, method, err))
				return
			}
			if !yield(msg, nil) {
				return
			}
		}
	}
}
