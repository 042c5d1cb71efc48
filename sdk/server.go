package sdk

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"berth.dev/berth/sdk/driverpb"
)

// grpcServer serves a Driver as driverpb.DriverServer: it maps errors to
// status codes (toStatus) and iterators to streams.
type grpcServer struct {
	driverpb.UnimplementedDriverServer
	impl Driver
	// name is the driver's name, put in error details.
	name string
}

var _ driverpb.DriverServer = (*grpcServer)(nil)

func (s *grpcServer) status(err error) error { return toStatus(s.name, err) }

func (s *grpcServer) Negotiate(ctx context.Context, req *driverpb.NegotiateRequest) (*driverpb.NegotiateResponse, error) {
	v, ok := pickAPIVersion(req.GetApiVersions())
	if !ok {
		return nil, s.status(fmt.Errorf("%w: client speaks %v, driver %q speaks %d to %d",
			ErrIncompatibleAPI, req.GetApiVersions(), s.name, MinAPIVersion, APIVersion))
	}
	info, err := s.impl.PluginInfo(ctx)
	if err != nil {
		return nil, s.status(err)
	}
	return &driverpb.NegotiateResponse{ApiVersion: v, Info: info}, nil
}

func (s *grpcServer) Capabilities(ctx context.Context, _ *driverpb.CapabilitiesRequest) (*driverpb.DriverCapabilities, error) {
	caps, err := s.impl.Capabilities(ctx)
	return caps, s.status(err)
}

func (s *grpcServer) ConfigSchema(ctx context.Context, _ *driverpb.ConfigSchemaRequest) (*driverpb.ConfigSchemas, error) {
	schemas, err := s.impl.ConfigSchema(ctx)
	return schemas, s.status(err)
}

func (s *grpcServer) SetConfig(ctx context.Context, cfg *driverpb.PluginConfig) (*driverpb.SetConfigResponse, error) {
	if err := s.impl.SetConfig(ctx, cfg); err != nil {
		return nil, s.status(err)
	}
	return &driverpb.SetConfigResponse{}, nil
}

func (s *grpcServer) Fingerprint(_ *driverpb.FingerprintRequest, stream grpc.ServerStreamingServer[driverpb.DriverFingerprint]) error {
	for fp, err := range s.impl.Fingerprint(stream.Context()) {
		if err != nil {
			return s.status(err)
		}
		if err := stream.Send(fp); err != nil {
			return err
		}
	}
	return nil
}

func (s *grpcServer) StartTask(ctx context.Context, cfg *driverpb.TaskConfig) (*driverpb.TaskHandle, error) {
	if err := ValidateTaskConfig(s.name, cfg); err != nil {
		return nil, s.status(err)
	}
	if err := s.checkMounts(ctx, cfg); err != nil {
		return nil, s.status(err)
	}
	h, err := s.impl.StartTask(ctx, cfg)
	return h, s.status(err)
}

// checkMounts refuses a task with mounts when the driver does not advertise
// mount_volumes. berth checks first; this catches any other client, so a
// driver written against this sdk never sees mounts it would ignore.
func (s *grpcServer) checkMounts(ctx context.Context, cfg *driverpb.TaskConfig) error {
	if len(cfg.GetMounts()) == 0 {
		return nil
	}
	caps, err := s.impl.Capabilities(ctx)
	if err != nil {
		return err
	}
	if !MountsSupported(APIVersion, caps) {
		return fmt.Errorf("%w: driver %q does not honour mounts (no mount_volumes capability), task %q has %d",
			ErrNotSupported, s.name, cfg.GetId(), len(cfg.GetMounts()))
	}
	return nil
}

func (s *grpcServer) WaitTask(ctx context.Context, req *driverpb.WaitTaskRequest) (*driverpb.ExitResult, error) {
	res, err := s.impl.WaitTask(ctx, req.GetTaskId())
	return res, s.status(err)
}

func (s *grpcServer) StopTask(ctx context.Context, req *driverpb.StopTaskRequest) (*driverpb.StopTaskResponse, error) {
	if err := s.impl.StopTask(ctx, req.GetTaskId(), time.Duration(req.GetTimeoutNanos()), req.GetSignal()); err != nil {
		return nil, s.status(err)
	}
	return &driverpb.StopTaskResponse{}, nil
}

func (s *grpcServer) DestroyTask(ctx context.Context, req *driverpb.DestroyTaskRequest) (*driverpb.DestroyTaskResponse, error) {
	if err := s.impl.DestroyTask(ctx, req.GetTaskId(), req.GetForce()); err != nil {
		return nil, s.status(err)
	}
	return &driverpb.DestroyTaskResponse{}, nil
}

func (s *grpcServer) InspectTask(ctx context.Context, req *driverpb.InspectTaskRequest) (*driverpb.TaskStatus, error) {
	st, err := s.impl.InspectTask(ctx, req.GetTaskId())
	return st, s.status(err)
}

func (s *grpcServer) RecoverTask(ctx context.Context, req *driverpb.RecoverTaskRequest) (*driverpb.RecoverTaskResponse, error) {
	if err := s.impl.RecoverTask(ctx, req.GetHandle()); err != nil {
		return nil, s.status(err)
	}
	return &driverpb.RecoverTaskResponse{}, nil
}

func (s *grpcServer) SignalTask(ctx context.Context, req *driverpb.SignalTaskRequest) (*driverpb.SignalTaskResponse, error) {
	if err := s.impl.SignalTask(ctx, req.GetTaskId(), req.GetSignal()); err != nil {
		return nil, s.status(err)
	}
	return &driverpb.SignalTaskResponse{}, nil
}

func (s *grpcServer) TaskEvents(_ *driverpb.TaskEventsRequest, stream grpc.ServerStreamingServer[driverpb.TaskEvent]) error {
	events := s.impl.TaskEvents(stream.Context())
	// The header tells the client the subscription exists, so events the
	// client causes after TaskEvents returns are not lost.
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	for ev, err := range events {
		if err != nil {
			return s.status(err)
		}
		if err := stream.Send(ev); err != nil {
			return err
		}
	}
	return nil
}

func (s *grpcServer) ExecTask(ctx context.Context, req *driverpb.ExecTaskRequest) (*driverpb.ExecResult, error) {
	ed, ok := s.impl.(ExecDriver)
	if !ok {
		return nil, s.status(fmt.Errorf("ExecTask: %w", ErrNotSupported))
	}
	res, err := ed.ExecTask(ctx, req.GetTaskId(), req.GetCommand(), time.Duration(req.GetTimeoutNanos()))
	return res, s.status(err)
}

func (s *grpcServer) TaskStats(req *driverpb.TaskStatsRequest, stream grpc.ServerStreamingServer[driverpb.TaskResourceUsage]) error {
	sd, ok := s.impl.(StatsDriver)
	if !ok {
		return s.status(fmt.Errorf("TaskStats: %w", ErrNotSupported))
	}
	for u, err := range sd.TaskStats(stream.Context(), req.GetTaskId(), time.Duration(req.GetIntervalNanos())) {
		if err != nil {
			return s.status(err)
		}
		if err := stream.Send(u); err != nil {
			return err
		}
	}
	return nil
}
