package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// Settings copied from host/server (setupRaft and raftConfig), which
// internal/ may not import: the bench must measure the stores, cache and
// transport the server runs with.
const (
	logCacheSize     = 512
	snapshotsRetain  = 2
	transportPool    = 3
	transportTimeout = 10 * time.Second
	// applyTimeout bounds how long a proposal may wait to enter raft's
	// queue (host/server's enqueueTimeout).
	applyTimeout = 30 * time.Second
	// leaderTimeout is generous: the first election takes one to two
	// heartbeat timeouts (1s each by default) on an idle machine, and this
	// one's speed drifts.
	leaderTimeout = 60 * time.Second
)

// raftServer is one raft server of a bench cluster with everything it
// opened, so it can be closed in order.
type raftServer struct {
	raft      *raft.Raft
	transport *raft.NetworkTransport
	store     *raftboltdb.BoltStore
}

// cluster is a set of raft servers in this process, talking TCP over
// loopback, with their data under dir.
type cluster struct {
	dir     string
	servers []*raftServer
	leader  *raft.Raft
}

// startCluster starts n servers running kind's FSM, bootstrapped together,
// and waits until one of them leads and has applied its first entries.
func startCluster(ctx context.Context, dir string, n int, kind fsmKind, logger hclog.Logger) (*cluster, error) {
	return startClusterWith(ctx, dir, n, kind, logger, tcpTransport)
}

// newTransport makes one server's raft transport on a free loopback port.
type newTransport func(logger hclog.Logger) (*raft.NetworkTransport, error)

func tcpTransport(logger hclog.Logger) (*raft.NetworkTransport, error) {
	return raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, transportPool, transportTimeout, logger.Named("raft-net"))
}

// startClusterWith is startCluster over the transports newT makes.
func startClusterWith(ctx context.Context, dir string, n int, kind fsmKind, logger hclog.Logger, newT newTransport) (_ *cluster, err error) {
	c := &cluster{dir: dir}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.shutdown())
		}
	}()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating cluster dir: %w", err)
	}

	// Every server must be in the bootstrap configuration, so all
	// transports (and their ports) exist before any server starts.
	var conf raft.Configuration
	for i := range n {
		t, err := newT(logger)
		if err != nil {
			return nil, fmt.Errorf("server %d: raft transport on 127.0.0.1: %w", i, err)
		}
		c.servers = append(c.servers, &raftServer{transport: t})
		conf.Servers = append(conf.Servers, raft.Server{
			ID: serverID(i), Address: t.LocalAddr(), Suffrage: raft.Voter,
		})
	}
	for i, s := range c.servers {
		if err := s.start(filepath.Join(dir, string(serverID(i))), serverID(i), conf, kind, logger); err != nil {
			return nil, fmt.Errorf("server %d: %w", i, err)
		}
	}
	if c.leader, err = c.waitLeader(ctx); err != nil {
		return nil, err
	}
	// The new leader's first entry must be applied before the clock starts.
	if err := c.leader.Barrier(applyTimeout).Error(); err != nil {
		return nil, fmt.Errorf("barrier on the new leader: %w", err)
	}
	return c, nil
}

func serverID(i int) raft.ServerID { return raft.ServerID(fmt.Sprintf("server-%d", i)) }

// start opens the stores the way host/server's setupRaft does, bootstraps
// them with conf and starts raft.
func (s *raftServer) start(dir string, id raft.ServerID, conf raft.Configuration, kind fsmKind, logger hclog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating raft dir: %w", err)
	}
	path := filepath.Join(dir, "raft.db")
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: path})
	if err != nil {
		return fmt.Errorf("opening raft log store %s: %w", path, err)
	}
	s.store = bolt
	logs, err := raft.NewLogCache(logCacheSize, bolt)
	if err != nil {
		return fmt.Errorf("raft log cache: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, snapshotsRetain, logger.Named("snapshot"))
	if err != nil {
		return fmt.Errorf("opening raft snapshot store: %w", err)
	}
	rc := raft.DefaultConfig()
	rc.LocalID = id
	rc.Logger = logger.Named("raft")
	if err := raft.BootstrapCluster(rc, logs, bolt, snaps, s.transport, conf); err != nil {
		return fmt.Errorf("bootstrapping: %w", err)
	}
	r, err := raft.NewRaft(rc, kind.newFSM(logger), logs, bolt, snaps, s.transport)
	if err != nil {
		return fmt.Errorf("starting raft: %w", err)
	}
	s.raft = r
	return nil
}

// waitLeader polls until a server is leader. Polling every few
// milliseconds adds nothing measurable next to an election.
func (c *cluster) waitLeader(ctx context.Context) (*raft.Raft, error) {
	ctx, cancel := context.WithTimeout(ctx, leaderTimeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, s := range c.servers {
			if s.raft.State() == raft.Leader {
				return s.raft, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no leader among %d servers after %s: %w", len(c.servers), leaderTimeout, ctx.Err())
		case <-tick.C:
		}
	}
}

// shutdown stops every server and removes the cluster's data. The leader
// goes first: followers then sit idle until their heartbeat timeout, which
// the rest of the shutdown does not reach, instead of the leader logging
// failed replication to followers already gone.
func (c *cluster) shutdown() error {
	var errs []error
	ordered := make([]*raftServer, 0, len(c.servers))
	for _, s := range c.servers {
		if s.raft != nil && s.raft == c.leader {
			ordered = append([]*raftServer{s}, ordered...)
		} else {
			ordered = append(ordered, s)
		}
	}
	for i, s := range ordered {
		if s.raft != nil {
			if err := s.raft.Shutdown().Error(); err != nil {
				errs = append(errs, fmt.Errorf("raft shutdown (server %d of %d): %w", i+1, len(ordered), err))
			}
		}
	}
	for _, s := range ordered {
		if s.transport != nil {
			if err := s.transport.Close(); err != nil {
				errs = append(errs, fmt.Errorf("closing raft transport %s: %w", s.transport.LocalAddr(), err))
			}
		}
		if s.store != nil {
			if err := s.store.Close(); err != nil {
				errs = append(errs, fmt.Errorf("closing raft log store: %w", err))
			}
		}
	}
	if err := os.RemoveAll(c.dir); err != nil {
		errs = append(errs, fmt.Errorf("removing cluster dir: %w", err))
	}
	return errors.Join(errs...)
}
