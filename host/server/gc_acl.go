package server

import (
	"context"
	"fmt"
	"time"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/endpoints"
	"berth.dev/berth/internal/versions"
	"berth.dev/berth/rpc/pb"
)

// tokenGCAfter is how long an expired ACL token stays (refused, and shown
// by `berth acl token list`) before the leader's GC deletes it.
const tokenGCAfter = time.Hour

// aclCommandsSince is the version ACLTokenDelete is proposed from (the
// ACL endpoints' gate).
var aclCommandsSince = versions.MustConstraint(">= " + endpoints.ACLSinceVersion)

// collectExpiredTokens deletes, through ACLTokenDelete, the ACL tokens
// that expired more than tokenGCAfter ago by the server's clock, at most
// a batch per call; it returns how many it named. Nothing is proposed
// while a server is older than the ACL gate.
func (s *Server) collectExpiredTokens(ctx context.Context) (int, error) {
	toks, err := s.fsm.State().ACLTokens(nil)
	if err != nil {
		return 0, err
	}
	cutoff := s.cfg.Clock.Now().Add(-tokenGCAfter)
	var expired []string
	for _, t := range toks {
		if exp := t.GetExpirationTime(); exp != 0 && time.Unix(0, exp).Before(cutoff) {
			expired = append(expired, t.GetAccessorId())
			if len(expired) == s.gc.batch {
				break
			}
		}
	}
	if len(expired) == 0 {
		return 0, nil
	}
	if err := s.requireServersAt(aclCommandsSince, endpoints.ACLSinceVersion, "expired ACL token GC"); err != nil {
		return 0, nil // an older server would not know the command: wait for the upgrade
	}
	if _, err := s.raftApply(ctx, fsm.ACLTokenDelete, &pb.ACLTokenDeleteCommand{AccessorIds: expired}); err != nil {
		return 0, fmt.Errorf("deleting %d expired ACL tokens: %w", len(expired), err)
	}
	s.logger.Info("expired ACL tokens garbage collected", "tokens", len(expired))
	return len(expired), nil
}
