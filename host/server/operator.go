package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/endpoints"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/pb"
)

// operatorEndpoint serves server-set and raft administration.
type operatorEndpoint struct {
	pb.UnimplementedOperatorServer
	s *Server
}

// Join adds a server as a voter and records its addresses. It is idempotent:
// servers call it on every start to keep their record current.
func (e *operatorEndpoint) Join(ctx context.Context, req *pb.JoinRequest) (*pb.JoinResponse, error) {
	s := e.s
	m := req.GetServer()
	if m.GetId() == "" || m.GetRaftAddr() == "" || m.GetRpcAddr() == "" {
		return nil, status.Error(codes.InvalidArgument, "join: server id, raft_addr and rpc_addr are required")
	}
	if err := s.refuseBelowGates(m); err != nil {
		s.warnMemberBelowGates(m, err)
		return nil, fmt.Errorf("join of %s on server %s: %w", m.GetName(), s.cfg.Name, err)
	}
	f, err := awaitCall(ctx, s.raft.GetConfiguration)
	if err != nil {
		return nil, fmt.Errorf("join of %s: reading the raft configuration on server %s: %w", m.GetName(), s.cfg.Name, err)
	}
	present := false
	for _, srv := range f.Configuration().Servers {
		switch {
		case string(srv.ID) == m.GetId() && string(srv.Address) == m.GetRaftAddr() && srv.Suffrage == raft.Voter:
			present = true
		case string(srv.ID) != m.GetId() && string(srv.Address) == m.GetRaftAddr():
			// A server re-created at the same address with a new data dir:
			// the old identity can never come back.
			s.logger.Info("removing stale server at joining address", "old_id", srv.ID, "addr", srv.Address)
			if err := s.removePeer(ctx, string(srv.ID)); err != nil {
				return nil, fmt.Errorf("removing stale server %s: %w", srv.ID, err)
			}
		}
	}
	if !present {
		timeout, err := raftTimeout(ctx)
		if err != nil {
			return nil, fmt.Errorf("join of %s on server %s: voter not added: %w", m.GetName(), s.cfg.Name, err)
		}
		if err := fsm.Await(ctx, s.raft.AddVoter(raft.ServerID(m.GetId()), raft.ServerAddress(m.GetRaftAddr()), 0, timeout)); err != nil {
			switch {
			case errors.Is(err, raft.ErrEnqueueTimeout) && timeout < enqueueTimeout:
				err = fmt.Errorf("not proposed: %w", callerDeadline(err))
			case ctx.Err() != nil:
				err = fmt.Errorf("gave up waiting; it may still join: %w", err)
			}
			return nil, fmt.Errorf("adding voter %s (%s) on server %s: %w", m.GetName(), m.GetRaftAddr(), s.cfg.Name, err)
		}
		s.logger.Info("server joined", "id", m.GetId(), "name", m.GetName(), "raft", m.GetRaftAddr())
	}
	idx, err := s.raftApply(ctx, fsm.ServerUpsert, &pb.ServerUpsertCommand{Server: m})
	if err != nil {
		return nil, err
	}
	return &pb.JoinResponse{Meta: &pb.WriteMeta{Index: idx}}, nil
}

// RemovePeer removes a server by ID, name or RPC address.
func (e *operatorEndpoint) RemovePeer(ctx context.Context, req *pb.RemovePeerRequest) (*pb.RemovePeerResponse, error) {
	s := e.s
	if req.GetId() == "" && req.GetName() == "" && req.GetRpcAddr() == "" {
		return nil, status.Error(codes.InvalidArgument, "remove peer: one of id, name or rpc_addr is required")
	}
	servers, err := s.raftServers()
	if err != nil {
		return nil, err
	}
	var target *pb.RaftServer
	for _, rs := range servers {
		if req.GetId() != "" && rs.GetId() == req.GetId() ||
			req.GetName() != "" && rs.GetName() == req.GetName() ||
			req.GetRpcAddr() != "" && rs.GetRpcAddr() == req.GetRpcAddr() {
			if target != nil {
				return nil, status.Errorf(codes.InvalidArgument, "remove peer: %q matches more than one server; use the id", req.GetName())
			}
			target = rs
		}
	}
	if target == nil {
		return nil, status.Errorf(codes.NotFound, "remove peer: no server matches id=%q name=%q rpc_addr=%q", req.GetId(), req.GetName(), req.GetRpcAddr())
	}
	if err := s.removePeer(ctx, target.GetId()); err != nil {
		return nil, err
	}
	return &pb.RemovePeerResponse{RemovedId: target.GetId(), Meta: &pb.WriteMeta{Index: s.raft.AppliedIndex()}}, nil
}

// recordCleanupTimeout bounds forgetting a removed server's record once
// its removal from raft committed; the caller's context no longer bounds
// it, or a caller leaving between the two would leave a record of a server
// that is no longer in raft.
const recordCleanupTimeout = 30 * time.Second

// removePeer removes a server from raft and forgets its record. For another
// server the raft change goes first, so a failure leaves a voter that is
// still recorded; once the change committed, the record is deleted even if
// the caller has left meanwhile. A leader removing itself steps down as
// soon as the change commits, so it forgets its record first and records
// itself again if the raft change fails. A ctx that has already ended
// changes nothing.
func (s *Server) removePeer(ctx context.Context, id string) error {
	timeout, err := raftTimeout(ctx)
	if err != nil {
		return fmt.Errorf("removing server %s on server %s: nothing proposed: %w", id, s.cfg.Name, err)
	}
	if id != s.id {
		if err := fsm.Await(ctx, s.raft.RemoveServer(raft.ServerID(id), 0, timeout)); err != nil {
			switch {
			case errors.Is(err, raft.ErrEnqueueTimeout) && timeout < enqueueTimeout:
				err = fmt.Errorf("not proposed: %w", callerDeadline(err))
			case ctx.Err() != nil:
				err = fmt.Errorf("gave up waiting; the removal may still happen, and its record stay until it is removed again: %w", err)
			}
			return fmt.Errorf("removing server %s from raft on server %s: %w", id, s.cfg.Name, err)
		}
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordCleanupTimeout)
		defer cancel()
		if _, err := s.raftApply(dctx, fsm.ServerDelete, &pb.ServerDeleteCommand{Id: id}); err != nil {
			return fmt.Errorf("server %s left raft but its record remains: %w", id, err)
		}
		s.logger.Info("server removed from cluster", "id", id)
		return nil
	}
	self, _ := s.fsm.State().ServerByID(nil, id)
	if _, err := s.raftApply(ctx, fsm.ServerDelete, &pb.ServerDeleteCommand{Id: id}); err != nil {
		return fmt.Errorf("forgetting server %s: %w", id, err)
	}
	// The delete took time: bound the raft change by what is left now.
	proposed := false
	if timeout, err = raftTimeout(ctx); err == nil {
		err = fsm.Await(ctx, s.raft.RemoveServer(raft.ServerID(id), 0, timeout))
		proposed = !errors.Is(err, raft.ErrEnqueueTimeout)
		if !proposed && timeout < enqueueTimeout {
			err = callerDeadline(err)
		}
	}
	if err == nil {
		s.logger.Info("server removed from cluster", "id", id)
		return nil
	}
	if proposed && ctx.Err() != nil {
		// The removal may still commit: re-recording this server now
		// could leave a record of a server that is no longer in raft.
		return fmt.Errorf("removing server %s from raft: gave up waiting; the removal may still happen: %w", id, err)
	}
	if self != nil {
		// The change failed or was never proposed: record this server
		// again, even if its caller has left.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordCleanupTimeout)
		defer cancel()
		if _, uerr := s.raftApply(rctx, fsm.ServerUpsert, &pb.ServerUpsertCommand{Server: self}); uerr != nil {
			s.logger.Error("re-recording this server after a failed leave", "error", uerr)
		}
	}
	if !proposed {
		err = fmt.Errorf("not proposed: %w", err)
	}
	return fmt.Errorf("removing server %s from raft: %w", id, err)
}

func (e *operatorEndpoint) RaftConfiguration(ctx context.Context, req *pb.RaftConfigurationRequest) (*pb.RaftConfigurationResponse, error) {
	s := e.s
	if req.GetQuery().GetConsistent() {
		if _, err := awaitCall(ctx, s.raft.VerifyLeader); err != nil {
			return nil, fmt.Errorf("server %s verifying its leadership: %w", s.cfg.Name, err)
		}
	}
	f, cerr := awaitCall(ctx, s.raft.GetConfiguration)
	if cerr != nil {
		return nil, fmt.Errorf("server %s reading its raft configuration: %w", s.cfg.Name, cerr)
	}
	resp := &pb.RaftConfigurationResponse{Index: f.Index(), Meta: s.queryMeta(f.Index())}
	var err error
	resp.Servers, resp.Meta.NextToken, err = serversPage(s.describeServers(f.Configuration()), req.GetQuery(), "the raft configuration")
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// serversPage is one page of the raft servers in ID order. None of the
// server lists block: raft has no watch on its configuration, and a list
// that accepted an index but never woke would mislead.
func serversPage(servers []*pb.RaftServer, q *pb.QueryOptions, what string) ([]*pb.RaftServer, string, error) {
	if err := endpoints.RefuseBlocking(q, what, "it is read from raft at request time"); err != nil {
		return nil, "", err
	}
	n, err := endpoints.PerPage(q)
	if err != nil {
		return nil, "", err
	}
	servers = slices.Clone(servers)
	slices.SortFunc(servers, func(a, b *pb.RaftServer) int { return strings.Compare(a.GetId(), b.GetId()) })
	page, next := endpoints.PageOf(servers, (*pb.RaftServer).GetId, q.GetNextToken(), n, nil)
	return page, next, nil
}

// raftServers joins the raft configuration with the servers table.
func (s *Server) raftServers() ([]*pb.RaftServer, error) {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	return s.describeServers(f.Configuration()), nil
}

// describeServers joins a raft configuration with the servers table.
func (s *Server) describeServers(conf raft.Configuration) []*pb.RaftServer {
	_, leaderID := s.raft.LeaderWithID()
	var out []*pb.RaftServer
	for _, srv := range conf.Servers {
		rs := &pb.RaftServer{
			Id:       string(srv.ID),
			RaftAddr: string(srv.Address),
			Leader:   srv.ID == leaderID,
			Voter:    srv.Suffrage == raft.Voter,
		}
		m, _ := s.fsm.State().ServerByID(nil, rs.Id)
		if m == nil {
			m = s.discovery.knownByID(rs.Id)
		}
		if m != nil {
			rs.Name, rs.RpcAddr = m.GetName(), m.GetRpcAddr()
		}
		out = append(out, rs)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out
}

// Members lists every server this one knows, pinging each to tell alive from
// failed; servers in state but no longer in the raft configuration have left.
func (e *operatorEndpoint) Members(ctx context.Context, req *pb.MembersRequest) (*pb.MembersResponse, error) {
	s := e.s
	q := req.GetQuery()
	if err := endpoints.RefuseBlocking(q, "members", "liveness is a ping at request time, not replicated state"); err != nil {
		return nil, err
	}
	n, err := endpoints.PerPage(q)
	if err != nil {
		return nil, err
	}
	inRaft, err := s.raftServers()
	if err != nil {
		return nil, err
	}
	byID := map[string]*pb.Member{}
	for _, rs := range inRaft {
		m, _ := s.fsm.State().ServerByID(nil, rs.GetId())
		if m == nil {
			m = &pb.ServerMember{Id: rs.GetId(), Name: rs.GetName(), RaftAddr: rs.GetRaftAddr(), RpcAddr: rs.GetRpcAddr()}
		}
		byID[rs.GetId()] = &pb.Member{Server: m, Leader: rs.GetLeader(), Voter: rs.GetVoter(), Status: pb.MemberStatus_MEMBER_STATUS_FAILED}
	}
	recorded, err := s.fsm.State().Servers(nil)
	if err != nil {
		return nil, err
	}
	for _, m := range recorded {
		if _, ok := byID[m.GetId()]; !ok {
			byID[m.GetId()] = &pb.Member{Server: m, Status: pb.MemberStatus_MEMBER_STATUS_LEFT}
		}
	}
	// Page before pinging, so a page costs pings of its own servers only.
	all := make([]*pb.Member, 0, len(byID))
	for _, m := range byID {
		all = append(all, m)
	}
	slices.SortFunc(all, func(a, b *pb.Member) int { return strings.Compare(a.GetServer().GetId(), b.GetServer().GetId()) })
	page, next := endpoints.PageOf(all, func(m *pb.Member) string { return m.GetServer().GetId() }, q.GetNextToken(), n, nil)
	var wg sync.WaitGroup
	for _, mem := range page {
		id := mem.GetServer().GetId()
		if mem.GetStatus() == pb.MemberStatus_MEMBER_STATUS_LEFT {
			continue
		}
		if id == s.id {
			mem.Status = pb.MemberStatus_MEMBER_STATUS_ALIVE
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if mem.GetServer().GetRpcAddr() == "" {
				return
			}
			if _, err := s.pingAddr(pctx, mem.GetServer().GetRpcAddr(), nil); err == nil {
				mem.Status = pb.MemberStatus_MEMBER_STATUS_ALIVE
			}
		}()
	}
	wg.Wait()
	meta := s.queryMeta(s.raft.AppliedIndex())
	meta.NextToken = next
	return &pb.MembersResponse{Members: page, Meta: meta}, nil
}

// snapshotChunkSize is the payload of one streamed snapshot message.
const snapshotChunkSize = 256 << 10

func (e *operatorEndpoint) SnapshotSave(req *pb.SnapshotSaveRequest, stream pb.Operator_SnapshotSaveServer) error {
	s := e.s
	if !s.IsLeader() {
		return e.proxySnapshotSave(req, stream)
	}
	f := s.raft.Snapshot()
	if err := f.Error(); err != nil {
		return toStatus(fmt.Errorf("taking snapshot: %w", err))
	}
	meta, rc, err := f.Open()
	if err != nil {
		return toStatus(fmt.Errorf("opening snapshot: %w", err))
	}
	defer rc.Close()
	w := &chunkWriter{send: func(b []byte) error { return stream.Send(&pb.SnapshotChunk{Data: b}) }}
	if err := writeArchive(w, meta, rc); err != nil {
		return toStatus(err)
	}
	return w.flush()
}

func (e *operatorEndpoint) proxySnapshotSave(req *pb.SnapshotSaveRequest, stream pb.Operator_SnapshotSaveServer) error {
	ctx := stream.Context()
	if rpc.Forwarded(ctx) {
		return status.Error(codes.Unavailable, "forwarded snapshot request reached a non-leader; retry")
	}
	conn, err := e.s.leaderConn(ctx)
	if err != nil {
		return err
	}
	up, err := pb.NewOperatorClient(conn).SnapshotSave(rpc.MarkForwarded(ctx, e.s.id), req)
	if err != nil {
		return err
	}
	for {
		chunk, err := up.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(chunk); err != nil {
			return err
		}
	}
}

// SnapshotRestore replaces the cluster's state with an uploaded archive.
// It answers once the leader holds the restored state; the followers
// acknowledge raft's install once the snapshot is on their disk and decode
// it after (fsm.DeferRestores), so their reads may be the state before
// the restore for as long as that decoding takes.
func (e *operatorEndpoint) SnapshotRestore(stream pb.Operator_SnapshotRestoreServer) error {
	s := e.s
	if !s.IsLeader() {
		return e.proxySnapshotRestore(stream)
	}
	// A leader that was a follower a moment ago may still be decoding a
	// snapshot raft installed: the members read below are the state's
	// once it is in.
	if err := s.awaitLeaderReady(stream.Context(), "SnapshotRestore"); err != nil {
		return err
	}
	// One upload and restore at a time: a second one would race the first
	// to raft (its offer taking the first's checked store away) and to the
	// upload's disk. The gate is let go once the state is restored: what
	// follows, waiting for the leader's duties, changes nothing, and a
	// restore that replaces this state meanwhile is answered for
	// (awaitDutiesOn).
	end, err := s.restoring.begin(stream.Context(), s.cfg.Clock.Now())
	if err != nil {
		return toStatus(err)
	}
	defer end()
	// Buffered beside raft's own files, whose disk it must not fill.
	dir := s.cfg.DataDir
	if dir == "" {
		dir = os.TempDir()
	}
	tmp, err := os.CreateTemp(dir, "berth-restore-*.snap")
	if err != nil {
		return toStatus(err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	maxBytes := s.cfg.SnapshotRestoreMaxBytes
	if maxBytes <= 0 {
		maxBytes = DefaultSnapshotRestoreMaxBytes
	}
	start := time.Now()
	if err := bufferRestore(stream, tmp, dir, maxBytes); err != nil {
		return toStatus(err)
	}
	uploaded := time.Now()
	meta, state, checked, err := readArchiveFor(s.fsm, tmp)
	if err != nil {
		return toStatus(err)
	}
	members, err := s.fsm.State().Servers(nil)
	if err != nil {
		return toStatus(err)
	}
	// Raft's leader loop waits while its FSM restores; the state was read
	// and checked above, so the FSM swaps that store in and does not read
	// the state a second time.
	withdraw := s.fsm.OfferRestore(checked)
	checkedAt := time.Now()
	err = s.raft.Restore(meta, state, time.Minute)
	withdraw()
	// Not offered any more: a store the FSM did not take (another
	// Restore came first) is garbage now, not held until the call ends.
	checked = nil
	restoredAt := time.Now()
	if err != nil {
		return toStatus(fmt.Errorf("restoring snapshot: %w", err))
	}
	// Raft keeps its configuration across a restore; keep the servers table
	// true to it, so a snapshot from another time does not lose the
	// addresses of today's members.
	if err := s.restoreMemberRecords(stream.Context(), members); err != nil {
		return status.Errorf(codes.Internal, "snapshot restored at index %d, but re-recording today's servers failed (they re-record themselves within a retry interval): %v", s.raft.AppliedIndex(), err)
	}
	end()
	// The leader loop sees the store replaced and starts its duties over
	// on it (leadOnce), heartbeat timers included; answer once they run,
	// so what the caller does next is seen by them.
	if err := s.awaitDutiesOn(stream.Context(), s.fsm.State()); err != nil {
		return status.Errorf(status.FromContextError(err).Code(), "snapshot restored at index %d; gave up waiting for the leader's duties to restart on it: %v", s.raft.AppliedIndex(), err)
	}
	// Where the seconds went: the upload, reading and checking it, raft's
	// restore (this server's and a quorum's: the followers install it),
	// the servers re-recorded and the duties restarted.
	s.logger.Info("snapshot restored", "snapshot_index", meta.Index, "bytes", meta.Size,
		"upload", uploaded.Sub(start), "check", checkedAt.Sub(uploaded), "raft", restoredAt.Sub(checkedAt), "after", time.Since(restoredAt))
	return stream.SendAndClose(&pb.SnapshotRestoreResponse{Meta: &pb.WriteMeta{Index: s.raft.AppliedIndex()}})
}

// restoreMemberRecords re-records, from the pre-restore records, every
// server still in the raft configuration whose record the restore changed.
func (s *Server) restoreMemberRecords(ctx context.Context, before []*pb.ServerMember) error {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	inRaft := map[string]bool{}
	for _, srv := range f.Configuration().Servers {
		inRaft[string(srv.ID)] = true
	}
	for _, m := range before {
		if !inRaft[m.GetId()] {
			continue
		}
		cur, err := s.fsm.State().ServerByID(nil, m.GetId())
		if err != nil {
			return err
		}
		if cur != nil && sameMember(cur, m) {
			continue
		}
		if _, err := s.raftApply(ctx, fsm.ServerUpsert, &pb.ServerUpsertCommand{Server: m}); err != nil {
			return err
		}
	}
	return nil
}

func (e *operatorEndpoint) proxySnapshotRestore(stream pb.Operator_SnapshotRestoreServer) error {
	ctx := stream.Context()
	if rpc.Forwarded(ctx) {
		return status.Error(codes.Unavailable, "forwarded snapshot restore reached a non-leader; retry")
	}
	conn, err := e.s.leaderConn(ctx)
	if err != nil {
		return err
	}
	up, err := pb.NewOperatorClient(conn).SnapshotRestore(rpc.MarkForwarded(ctx, e.s.id))
	if err != nil {
		return err
	}
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if err := up.Send(chunk); err != nil {
			return err
		}
	}
	resp, err := up.CloseAndRecv()
	if err != nil {
		return err
	}
	return stream.SendAndClose(resp)
}

// chunkWriter batches writes into snapshotChunkSize messages.
type chunkWriter struct {
	buf  []byte
	send func([]byte) error
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		room := snapshotChunkSize - len(w.buf)
		take := min(room, len(p))
		w.buf = append(w.buf, p[:take]...)
		p = p[take:]
		if len(w.buf) == snapshotChunkSize {
			if err := w.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (w *chunkWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	err := w.send(w.buf)
	w.buf = make([]byte, 0, snapshotChunkSize)
	return err
}
