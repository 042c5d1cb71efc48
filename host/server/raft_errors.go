package server

import (
	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
)

// raftCodes lists raft's sentinels that reach berth's API, with the code
// each stands for. The server is what wraps raft, so the table is here;
// init hands it to rpc/errcode, which then classifies these errors (by
// identity, never by message) wherever they travel, without importing
// raft itself.
var raftCodes = []struct {
	err  error
	code codes.Code
}{
	// Leadership moved or the server is going away: the request did nothing,
	// or (ErrLeadershipLost) may commit under the next leader; either way the
	// caller retries, which is what Unavailable tells it.
	{raft.ErrNotLeader, codes.Unavailable},
	{raft.ErrLeadershipLost, codes.Unavailable},
	{raft.ErrRaftShutdown, codes.Unavailable},
	{raft.ErrEnqueueTimeout, codes.Unavailable},
	{raft.ErrLeadershipTransferInProgress, codes.Unavailable},
	{raft.ErrTransportShutdown, codes.Unavailable},
	// An operator's snapshot restore cancelled the in-flight command.
	{raft.ErrAbortedByRestore, codes.Aborted},
	{raft.ErrNotVoter, codes.FailedPrecondition},
	{raft.ErrLeader, codes.FailedPrecondition},
	{raft.ErrCantBootstrap, codes.FailedPrecondition},
	{raft.ErrNothingNewToSnapshot, codes.FailedPrecondition},
	{raft.ErrUnsupportedProtocol, codes.FailedPrecondition},
}

func init() {
	for _, r := range raftCodes {
		errcode.RegisterForeign(r.err, r.code)
	}
}
