//go:build linux

package hostpath

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// delay is the fault-injection interceptor: it holds the calls named in
// DelayBefore before they run and the replies of those in DelayAfter after
// they ran. It is only installed when a delay is configured.
func (s *Services) delay(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := path.Base(info.FullMethod)
	if d, ok := s.cfg.DelayBefore[method]; ok {
		if err := s.hold(ctx, method, "before", req, d); err != nil {
			return nil, err
		}
	}
	resp, err := handler(ctx, req)
	if d, ok := s.cfg.DelayAfter[method]; ok {
		// The work is done whatever the hold ends in; a caller that gives
		// up now sees its own cancellation, as it would from a slow plugin.
		if herr := s.hold(ctx, method, "after", req, d); herr != nil {
			return nil, herr
		}
	}
	return resp, err
}

// hold leaves the call's marker and waits d or until the caller gives up.
func (s *Services) hold(ctx context.Context, method, when string, req any, d time.Duration) error {
	vol := "none"
	if r, ok := req.(interface{ GetVolumeId() string }); ok && validID(volumePrefix, r.GetVolumeId()) {
		vol = r.GetVolumeId()
	}
	s.log.Info("fault injection: holding call", "method", method, "when", when, "delay", d, "volume_id", vol)
	if s.cfg.DelayMarkerDir != "" {
		if err := s.writeMarker(method, when, vol, d); err != nil {
			// A drill waiting for a marker that never comes would hang: fail
			// the call loudly instead.
			s.log.Error("fault injection: writing the marker", "method", method, "error", err)
			return status.Errorf(codes.Internal, "%s: fault injection marker in %s: %v", method, s.cfg.DelayMarkerDir, err)
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// markerName is the file a held call leaves in DelayMarkerDir:
// <method>.<before|after>.<volume ID or "none">.<node ID or "controller">.<pid>.<n>,
// unique across restarts of the plugin (the PID) and calls (n).
func (s *Services) markerName(method, when, vol string) string {
	node := s.cfg.NodeID
	if !s.cfg.node || node == "" {
		node = "controller"
	}
	return fmt.Sprintf("%s.%s.%s.%s.%d.%d", method, when, vol, node, os.Getpid(), s.delaySeq.Add(1))
}

func (s *Services) writeMarker(method, when, vol string, d time.Duration) error {
	if err := os.MkdirAll(s.cfg.DelayMarkerDir, 0o755); err != nil {
		return err
	}
	body := fmt.Sprintf("method=%s when=%s volume_id=%s node_id=%s delay=%s started=%s\n",
		method, when, vol, s.cfg.NodeID, d, time.Now().UTC().Format(time.RFC3339Nano))
	return os.WriteFile(filepath.Join(s.cfg.DelayMarkerDir, s.markerName(method, when, vol)), []byte(body), 0o644)
}
