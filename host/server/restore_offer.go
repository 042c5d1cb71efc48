package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/pb"
)

// An operator's restore commits only once a follower has installed the
// snapshot (raft's Restore waits for a no-op after it), and a follower
// installing it decoded the whole state: at 10,000 nodes most of raft's
// part of the restore, after the leader's own check of the upload, on the
// same cores. So the leader hands the upload to every follower as it
// starts its check (SnapshotOffer); each reads and checks it at the same
// time as the leader and offers the store to its FSM (fsm.OfferRestore),
// and raft's install of the same bytes swaps that store in. The leader
// waits for the followers' checks (up to offerWait) before raft restores.
// A follower that fails, or does not serve the method (an older server),
// decodes when it installs, as before.

const (
	// offerWait bounds the leader's wait for its followers' checks.
	offerWait = 30 * time.Second
	// offerHold is how long a follower keeps a checked upload no install
	// took: the leader restores within seconds of the check, or failed.
	offerHold = 2 * time.Minute
)

// heldOffer is the upload a follower checked and holds for raft's
// install of it, one at a time: a newer offer replaces it.
type heldOffer struct {
	mu      sync.Mutex
	release func()
}

// replace releases the offer held now and makes release the one held.
func (h *heldOffer) replace(release func()) {
	h.mu.Lock()
	prev := h.release
	h.release = release
	h.mu.Unlock()
	if prev != nil {
		prev()
	}
}

// offerToFollowers sends the archive in f, size bytes, to every other
// voter at once, and returns a wait for their answers: it returns when
// all answered, when offerWait passed, or when ctx ends, and logs the
// followers that did not take it.
func (s *Server) offerToFollowers(ctx context.Context, f io.ReaderAt, size int64) (wait func()) {
	future := s.raft.GetConfiguration()
	if err := future.Error(); err != nil {
		s.logger.Warn("snapshot offer: reading the raft configuration failed; the followers decode the snapshot when they install it", "error", err)
		return func() {}
	}
	ctx, cancel := context.WithTimeout(ctx, offerWait)
	var wg sync.WaitGroup
	for _, srv := range future.Configuration().Servers {
		if string(srv.ID) == s.id || srv.Suffrage != raft.Voter {
			continue
		}
		wg.Go(func() {
			if err := s.offerTo(ctx, string(srv.ID), io.NewSectionReader(f, 0, size)); err != nil {
				level := s.logger.Warn
				if status.Code(err) == codes.Unimplemented {
					level = s.logger.Debug
				}
				level("snapshot offer: the follower decodes the snapshot when it installs it", "server", srv.ID, "error", err)
			}
		})
	}
	return func() {
		wg.Wait()
		cancel()
	}
}

// offerTo streams r to the server id.
func (s *Server) offerTo(ctx context.Context, id string, r io.Reader) error {
	var addr string
	if m, err := s.fsm.State().ServerByID(nil, id); err == nil && m != nil {
		addr = m.GetRpcAddr()
	} else if m := s.discovery.knownByID(id); m != nil {
		addr = m.GetRpcAddr()
	}
	if addr == "" {
		return errors.New("its RPC address is not known")
	}
	conn, err := s.pool.Conn(addr)
	if err != nil {
		return err
	}
	up, err := pb.NewOperatorClient(conn).SnapshotOffer(rpc.MarkForwarded(ctx, s.id))
	if err != nil {
		return err
	}
	buf := make([]byte, snapshotChunkSize)
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if serr := up.Send(&pb.SnapshotChunk{Data: buf[:n]}); serr != nil {
				// The server's error comes with the answer.
				_, rerr := up.CloseAndRecv()
				return errors.Join(serr, rerr)
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	_, err = up.CloseAndRecv()
	return err
}

// SnapshotOffer buffers a leader's offered upload, reads and checks it as
// the leader does, and offers the result to this server's FSM until raft
// installs it (or offerHold passes). It answers once the offer is in
// place, so the leader's restore that follows finds it.
func (e *operatorEndpoint) SnapshotOffer(stream pb.Operator_SnapshotOfferServer) error {
	s := e.s
	if s.IsLeader() {
		return status.Error(codes.FailedPrecondition, "snapshot offer reached the leader, which checks its upload itself")
	}
	dir := s.cfg.DataDir
	if dir == "" {
		dir = os.TempDir()
	}
	tmp, err := os.CreateTemp(dir, "berth-offer-*.snap")
	if err != nil {
		return toStatus(err)
	}
	release := sync.OnceFunc(func() {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
	})
	maxBytes := s.cfg.SnapshotRestoreMaxBytes
	if maxBytes <= 0 {
		maxBytes = DefaultSnapshotRestoreMaxBytes
	}
	// What this server held for an earlier restore is of no use now, and
	// its disk and memory go before this one's are taken.
	s.offer.replace(nil)
	start := time.Now()
	if err := bufferRestore(stream, tmp, dir, maxBytes); err != nil {
		release()
		return toStatus(err)
	}
	_, _, checked, err := readArchiveFor(s.fsm, tmp)
	if err != nil {
		release()
		return toStatus(fmt.Errorf("checking the offered snapshot: %w", err))
	}
	withdraw := s.fsm.OfferRestore(checked)
	released := make(chan struct{})
	release = sync.OnceFunc(func() {
		// withdraw returns once no Restore reads the file.
		withdraw()
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
		close(released)
	})
	s.offer.replace(release)
	expire := s.cfg.Clock.AfterFunc(offerHold, release)
	taken := checked.Taken()
	go func() {
		select {
		case <-taken:
		case <-released:
		case <-s.shutdownCtx.Done():
		}
		expire.Stop()
		release()
	}()
	s.logger.Info("snapshot offer checked", "bytes", checked.Size(), "took", time.Since(start))
	return stream.SendAndClose(&pb.SnapshotOfferResponse{})
}
