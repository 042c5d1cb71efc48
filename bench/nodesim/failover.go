package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
)

// failoverRun is the leader killed (SIGKILL) with every node ready.
type failoverRun struct {
	// ElectedSeconds is from the kill to a new leader answering;
	// EvalSeconds to a job registered after the kill running (the new
	// leader's broker, workers, plan applier and the nodes' alloc watch
	// all working again).
	ElectedSeconds float64 `json:"elected_seconds"`
	EvalSeconds    float64 `json:"eval_seconds"`
	// AcceptedSeconds is from the kill to the new leader accepting the
	// job (its barrier passed: the duties start); PlacedSeconds to the
	// job's alloc placed (the broker, a worker and the plan applier ran
	// on the new leader). Neither waits for a node.
	AcceptedSeconds float64 `json:"accepted_seconds"`
	PlacedSeconds   float64 `json:"placed_seconds"`
	// WatchSeconds is how long node statuses were watched after the new
	// leader was elected (past the TTL and the grace it gives after a
	// leader change); NodesDown how many nodes it marked down meanwhile.
	WatchSeconds float64 `json:"watch_seconds"`
	NodesDown    int     `json:"nodes_down"`
	// RejoinSeconds is from starting the killed server again to it
	// answering with the state written after the kill.
	RejoinSeconds float64 `json:"rejoin_seconds"`
	// Steps is the job's way from placed to running, as its node saw it
	// (seconds from the kill; 0: not seen): the node's alloc watch
	// answered with it, the driver started its task, the node's update
	// with it running answered (applied).
	Steps *failoverSteps `json:"steps,omitempty"`
}

// failoverSteps is when the failover job's alloc passed each step on its
// node, in seconds from the kill.
type failoverSteps struct {
	NodeSeen    float64 `json:"node_seen_seconds"`
	TaskStarted float64 `json:"task_started_seconds"`
	RunningSent float64 `json:"running_sent_seconds"`
}

// failover kills the leader and measures the new one taking over. The
// nodes' heartbeats fail over to the surviving servers by themselves
// (host/client's server rotation).
func (s *sim) failover(ctx context.Context, watch time.Duration) (*failoverRun, error) {
	old, err := s.leader(ctx)
	if err != nil {
		return nil, err
	}
	if old == nil {
		return nil, errors.New("the servers are not the simulator's: it cannot kill the leader")
	}
	var survivor *server
	for _, sv := range s.servers {
		if sv != old && sv.alive() {
			survivor = sv
			break
		}
	}
	if survivor == nil {
		return nil, errors.New("the leader is the only server: no failover to measure")
	}
	c, err := apiClient(survivor.http, s.pki)
	if err != nil {
		return nil, err
	}
	// The job is parsed before the kill, so the clock measures the cluster.
	job, err := simJob("nodesim-failover", 1)
	if err != nil {
		return nil, err
	}
	if err := s.startPhases(); err != nil {
		return nil, err
	}
	start := time.Now()
	old.kill()
	r := &failoverRun{}
	// The survivor names the dead leader until its election timeout: wait
	// for another.
	for {
		l, err := waitLeader(ctx, c)
		if err != nil {
			return nil, err
		}
		if l != old.rpc {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond): // the measurement's resolution
		}
	}
	r.ElectedSeconds = time.Since(start).Seconds()
	s.api = c
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := c.Jobs().Register(cctx, job, nil)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil, s.withLogs(fmt.Errorf("registering a job after the failover: %w", err))
		}
	}
	r.AcceptedSeconds = time.Since(start).Seconds()
	if err := s.waitJob(ctx, c, "nodesim-failover", 1, func() { r.PlacedSeconds = time.Since(start).Seconds() }); err != nil {
		return nil, err
	}
	r.EvalSeconds = time.Since(start).Seconds()
	if r.Steps, err = s.failoverSteps(ctx, c, start); err != nil {
		return nil, err
	}
	down, err := s.watchNodesDown(ctx, c, start.Add(time.Duration(r.ElectedSeconds*float64(time.Second))).Add(watch))
	if err != nil {
		return nil, err
	}
	r.WatchSeconds = watch.Seconds()
	r.NodesDown = down
	// The killed server is started again and caught up, so what follows
	// (the snapshot) runs on a whole cluster, not one whose leader leans on
	// its only follower.
	rejoin := time.Now()
	if err := old.start(s.cfg.bin); err != nil {
		return nil, err
	}
	oc, err := apiClient(old.http, s.pki)
	if err != nil {
		return nil, err
	}
	if err := s.waitJob(ctx, oc, "nodesim-failover", 1, nil); err != nil {
		return nil, fmt.Errorf("the killed server, started again, catching up: %w", err)
	}
	r.RejoinSeconds = time.Since(rejoin).Seconds()
	return r, nil
}

// failoverSteps reads, from the phases the nodes recorded, when the
// failover job's alloc passed each step on its node.
func (s *sim) failoverSteps(ctx context.Context, c *api.Client, start time.Time) (*failoverSteps, error) {
	if err := s.gatherPhases(); err != nil {
		return nil, err
	}
	allocs, _, err := c.Jobs().Allocations(ctx, "nodesim-failover", nil)
	if err != nil {
		return nil, fmt.Errorf("listing the failover job's allocs: %w", err)
	}
	if len(allocs) == 0 {
		return nil, errors.New("the failover job has no alloc")
	}
	since := func(p phase) float64 {
		t, ok := s.phases.get(p, allocs[0].GetId())
		if !ok {
			return 0
		}
		return t.Sub(start).Seconds()
	}
	return &failoverSteps{NodeSeen: since(phaseNodeSeen), TaskStarted: since(phaseTaskStarted), RunningSent: since(phaseRunningSent)}, nil
}

// watchNodesDown follows the node list by blocking queries until the
// deadline and returns how many distinct nodes were seen down.
func (s *sim) watchNodesDown(ctx context.Context, c *api.Client, until time.Time) (int, error) {
	down := map[string]bool{}
	var index uint64
	for time.Now().Before(until) {
		q := &api.QueryOptions{PerPage: 1000, WaitIndex: index, WaitTime: min(time.Until(until), 5*time.Second) + time.Millisecond}
		var last uint64
		for {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			nodes, meta, err := c.Nodes(cctx, q)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return 0, err
				}
				last = 0
				break
			}
			for _, n := range nodes {
				if n.GetStatus() == pb.NodeStatus_NODE_STATUS_DOWN {
					down[n.GetId()] = true
				}
			}
			last = max(last, meta.LastIndex)
			if meta.NextToken == "" {
				break
			}
			q = &api.QueryOptions{PerPage: 1000, NextToken: meta.NextToken}
		}
		index = last
	}
	return len(down), nil
}

// snapshotRun is a snapshot of the state the run built, saved and
// restored through the API.
type snapshotRun struct {
	Bytes          int64   `json:"bytes"`
	SaveSeconds    float64 `json:"save_seconds"`
	RestoreSeconds float64 `json:"restore_seconds"`
	// RestoreError is why the restore failed (the save's figures stand).
	RestoreError string `json:"restore_error,omitempty"`
}

// snapshot saves the cluster's state and restores it into the same
// cluster (the state is the same, so the nodes carry on).
func (s *sim) snapshot(ctx context.Context) (*snapshotRun, error) {
	var buf bytes.Buffer
	start := time.Now()
	n, err := s.api.SnapshotSave(ctx, &buf)
	if err != nil {
		return nil, s.withLogs(fmt.Errorf("snapshot save: %w", err))
	}
	r := &snapshotRun{Bytes: n, SaveSeconds: time.Since(start).Seconds()}
	start = time.Now()
	if _, err := s.api.SnapshotRestore(ctx, bytes.NewReader(buf.Bytes())); err != nil {
		r.RestoreError = err.Error()
		return r, s.withLogs(fmt.Errorf("snapshot restore: %w", err))
	}
	r.RestoreSeconds = time.Since(start).Seconds()
	return r, nil
}

// waitJob follows job id's summary by blocking queries on c until n of
// its allocs run, calling placed once all n are placed.
func (s *sim) waitJob(ctx context.Context, c *api.Client, id string, n int, placed func()) error {
	var index uint64
	for {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		sum, meta, err := c.Jobs().Summary(cctx, id, &api.QueryOptions{WaitIndex: index, WaitTime: 5 * time.Second})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return s.withLogs(fmt.Errorf("job %s: %w", id, err))
			}
			// A server starting, or not yet holding the job: ask again
			// shortly (a failed call returns at once).
			index = 0
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		index = meta.LastIndex
		g := sum.GetGroups()["app"]
		if placed != nil && g.GetPending()+g.GetRunning()+g.GetComplete()+g.GetFailed()+g.GetLost() >= int32(n) {
			placed()
			placed = nil
		}
		if g.GetRunning() >= int32(n) {
			return nil
		}
		if ctx.Err() != nil {
			return s.withLogs(fmt.Errorf("job %s: %d of %d allocs running: %w", id, g.GetRunning(), n, ctx.Err()))
		}
	}
}
