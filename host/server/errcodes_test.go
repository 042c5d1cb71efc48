package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

func TestSentinelsCarryTheirCodes(t *testing.T) {
	testutil.CheckSentinelCodes(t, map[error]codes.Code{
		ErrBadArchive:        codes.InvalidArgument,
		ErrRestoreTooLarge:   codes.InvalidArgument,
		ErrRestoreNoSpace:    codes.ResourceExhausted,
		ErrRestoreInProgress: codes.FailedPrecondition,
		ErrCommandTooLarge:   codes.InvalidArgument,
		ErrServerOnly:        codes.PermissionDenied,
		ErrNodeRole:          codes.PermissionDenied,
		ErrServerBelowGate:   codes.FailedPrecondition,
	})
}

// TestToStatusClassifiesByTheErrorChain checks what a handler's error leaves
// the server as: the code of what it wraps, never of its text, and Unknown
// (not Internal) for an error nobody classified.
func TestToStatusClassifiesByTheErrorChain(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want codes.Code
	}{
		{fmt.Errorf("registering node n1: %w", raft.ErrNotLeader), codes.Unavailable},
		{fmt.Errorf("registering node n1: %w", raft.ErrLeadershipLost), codes.Unavailable},
		{fmt.Errorf("apply: %w", fmt.Errorf("raft log entry 7: %w", fsm.ErrInvalidCommand)), codes.InvalidArgument},
		{fmt.Errorf("restoring: %w", fsm.ErrSnapshotVersion), codes.FailedPrecondition},
		{fmt.Errorf("waiting: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{status.Error(codes.PermissionDenied, "no"), codes.PermissionDenied},
		{errors.New("node not found"), codes.Unknown},
	} {
		st := status.Convert(toStatus(tt.err))
		if st.Code() != tt.want || st.Message() != status.Convert(tt.err).Message() {
			t.Errorf("toStatus(%v) = %s %q, want %s", tt.err, st.Code(), st.Message(), tt.want)
		}
	}
}

// TestUnregisteredNodeIsNodeNotFound asks a follower about a node nobody
// registered: the refusal is fsm.ErrNodeNotFound on the server (errors.Is
// works there), NotFound over gRPC through the forwarding hop, and its
// message names the node.
func TestUnregisteredNodeIsNodeNotFound(t *testing.T) {
	tc := newTestCluster(t, 3)
	leader := tc.waitLeader()
	follower := tc.followers(leader)[0]
	ghost := testNode("ghost").GetId()

	_, err := leader.api.Nodes.Heartbeat(context.Background(), &pb.NodeHeartbeatRequest{NodeId: ghost})
	if !errors.Is(err, fsm.ErrNodeNotFound) || !strings.Contains(err.Error(), ghost) {
		t.Fatalf("Heartbeat handler: %v, want fsm.ErrNodeNotFound naming %s", err, ghost)
	}
	_, err = follower.api.Nodes.Get(context.Background(), &pb.NodeGetRequest{NodeId: ghost})
	if !errors.Is(err, fsm.ErrNodeNotFound) || !strings.Contains(err.Error(), ghost) {
		t.Fatalf("Get handler: %v, want fsm.ErrNodeNotFound naming %s", err, ghost)
	}

	// A leader still applying its predecessor's log answers Unavailable;
	// wait that out, then look at the answer.
	nodes := pb.NewNodesClient(tc.conn(follower))
	ask := map[string]func(context.Context) error{
		"Heartbeat": func(ctx context.Context) error {
			_, err := nodes.Heartbeat(ctx, &pb.NodeHeartbeatRequest{NodeId: ghost})
			return err
		},
		"consistent Get": func(ctx context.Context) error {
			_, err := nodes.Get(ctx, &pb.NodeGetRequest{NodeId: ghost, Query: &pb.QueryOptions{Consistent: true}})
			return err
		},
	}
	for name, call := range ask {
		var st *status.Status
		testutil.WaitFor(t, 10*time.Second, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if st = status.Convert(call(ctx)); st.Code() == codes.Unavailable {
				return st.Err()
			}
			return nil
		})
		if st.Code() != codes.NotFound || !strings.Contains(st.Message(), ghost) || !strings.Contains(st.Message(), fsm.ErrNodeNotFound.Error()) {
			t.Errorf("%s through a follower: %s %q, want NotFound naming %s", name, st.Code(), st.Message(), ghost)
		}
	}
}

// TestRestoreRefusesAStateTheFSMCannotRead sends an archive whose checksum
// is right but whose state is not a snapshot: raft would panic on it, so the
// server must refuse it with fsm.ErrSnapshotCorrupt and keep serving with
// its state unchanged.
func TestRestoreRefusesAStateTheFSMCannotRead(t *testing.T) {
	tc := newTestCluster(t, 1)
	s := tc.servers[0]
	n := testNode("kept")
	if _, err := tc.register(s, n); err != nil {
		t.Fatal(err)
	}
	state := []byte("a checksum does not make this a snapshot")
	var archive bytes.Buffer
	meta := &raft.SnapshotMeta{Version: 1, ID: "forged", Index: 5, Term: 1, Size: int64(len(state))}
	if err := writeArchive(&archive, meta, bytes.NewReader(state)); err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(t.TempDir(), "archive")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(archive.Bytes()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readArchive(f); !errors.Is(err, ErrBadArchive) || !strings.Contains(err.Error(), fsm.ErrSnapshotCorrupt.Error()) {
		t.Fatalf("readArchive = %v, want ErrBadArchive naming the corrupt snapshot", err)
	}

	err = restoreSnapshot(tc, s, archive.Bytes())
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), fsm.ErrSnapshotCorrupt.Error()) {
		t.Fatalf("restore of a forged archive: %v, want InvalidArgument naming the corrupt snapshot", err)
	}
	got, err := pb.NewNodesClient(tc.conn(s)).Get(context.Background(), &pb.NodeGetRequest{NodeId: n.GetId()})
	if err != nil || got.GetNode().GetName() != "kept" {
		t.Fatalf("after the refused restore: %v, %v", got, err)
	}
}

// The raft rows of errcode's tests (moved here with the raft table): raft's
// sentinels, registered by this package, are classified by errcode's Code,
// Status and Fallback wherever they travel.
func TestRaftSentinelsAreClassified(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want codes.Code
	}{
		{"raft not leader", fmt.Errorf("apply: %w", raft.ErrNotLeader), codes.Unavailable},
		{"raft leadership lost", raft.ErrLeadershipLost, codes.Unavailable},
		{"raft shutdown", raft.ErrRaftShutdown, codes.Unavailable},
		{"raft enqueue timeout", raft.ErrEnqueueTimeout, codes.Unavailable},
		{"raft transfer", raft.ErrLeadershipTransferInProgress, codes.Unavailable},
		{"raft restore", raft.ErrAbortedByRestore, codes.Aborted},
	}
	for _, tt := range tests {
		if got := errcode.Code(tt.err); got != tt.want {
			t.Errorf("%s: Code(%v) = %s, want %s", tt.name, tt.err, got, tt.want)
		}
	}
	for _, r := range raftCodes {
		if got := errcode.Code(fmt.Errorf("wrapped: %w", r.err)); got != r.code {
			t.Errorf("Code(%v) = %s, want %s", r.err, got, r.code)
		}
	}
	if got := errcode.Status(raft.ErrNotLeader); status.Code(got) != codes.Unavailable || status.Convert(got).Message() != raft.ErrNotLeader.Error() {
		t.Fatalf("Status(raft.ErrNotLeader) = %v", got)
	}
	errStart := errcode.New(codes.Unavailable, "plugin failed to start")
	err := errcode.Fallback(errStart, raft.ErrNotLeader)
	if !errors.Is(err, errStart) || !errors.Is(err, raft.ErrNotLeader) {
		t.Errorf("foreign cause: errors.Is lost the sentinel or the cause")
	}
	if want := "plugin failed to start: " + raft.ErrNotLeader.Error(); err.Error() != want {
		t.Errorf("foreign cause: message %q, want %q", err, want)
	}
	for _, e := range []error{err, fmt.Errorf("driver d1: %w", err)} {
		if got := errcode.Code(e); got != codes.Unavailable {
			t.Errorf("foreign cause: Code(%v) = %s, want %s", e, got, codes.Unavailable)
		}
		st := status.Convert(errcode.Status(e))
		if st.Code() != codes.Unavailable || st.Message() != e.Error() {
			t.Errorf("foreign cause: Status(%v) = %s %q", e, st.Code(), st.Message())
		}
		if st, _ := status.FromError(e); st.Code() != codes.Unavailable {
			t.Errorf("foreign cause: status.FromError(%v) = %s, want %s", e, st.Code(), codes.Unavailable)
		}
	}
}
