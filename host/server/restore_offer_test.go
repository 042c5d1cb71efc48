package server

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// An operator's restore is checked by a quorum's followers (one of two)
// while the leader checks it, so raft's install of it on that follower
// swaps in the store already read instead of decoding the state then; the
// other follower decodes it when it installs, as before.
func TestAQuorumOfFollowersInstallTheOfferedRestoreWithoutDecoding(t *testing.T) {
	var mu sync.Mutex
	logs := map[string]*lockedBuffer{}
	tc := newTestCluster(t, 3, func(c *testConfig) {
		buf := &lockedBuffer{}
		mu.Lock()
		logs[c.Name] = buf
		mu.Unlock()
		c.Logger = hclog.New(&hclog.LoggerOptions{Name: c.Name, Level: hclog.Info, Output: buf})
	})
	leader := tc.waitLeader()
	kept, dropped := testNode("kept"), testNode("dropped")
	if _, err := tc.register(leader, kept); err != nil {
		t.Fatal(err)
	}
	snap := saveSnapshot(t, tc, leader)
	if _, err := tc.register(leader, dropped); err != nil {
		t.Fatal(err)
	}
	if err := restoreSnapshot(tc, leader, snap); err != nil {
		t.Fatalf("restore: %v", err)
	}
	offered := 0
	for _, f := range tc.followers(leader) {
		var restores []string
		testutil.WaitFor(t, 10*time.Second, func() error {
			mu.Lock()
			out := logs[f.cfg.Name].String()
			mu.Unlock()
			restores = nil
			for line := range strings.Lines(out) {
				if strings.Contains(line, "restored state from snapshot") {
					restores = append(restores, strings.TrimSpace(line))
				}
			}
			if len(restores) == 0 {
				return fmt.Errorf("%s has not installed the snapshot", f.cfg.Name)
			}
			return nil
		})
		if len(restores) != 1 {
			t.Fatalf("%s's FSM restores: %q; want one", f.cfg.Name, restores)
		}
		if strings.Contains(restores[0], "checked_before=true") {
			offered++
		}
		if n, _ := f.State().NodeByID(nil, dropped.GetId()); n != nil {
			t.Fatalf("%s holds the node registered after the snapshot", f.cfg.Name)
		}
		if n, _ := f.State().NodeByID(nil, kept.GetId()); n == nil {
			t.Fatalf("%s lost the snapshot's node", f.cfg.Name)
		}
	}
	if offered != 1 {
		t.Fatalf("%d followers installed the store their check of the offer read (checked_before=true), want 1 of 2", offered)
	}
}

func offerSnapshot(tc *testCluster, s *Server, data []byte) error {
	stream, err := pb.NewOperatorClient(tc.conn(s)).SnapshotOffer(context.Background())
	if err != nil {
		return err
	}
	for len(data) > 0 {
		n := min(len(data), 1000)
		if err := stream.Send(&pb.SnapshotChunk{Data: data[:n]}); err != nil {
			break
		}
		data = data[n:]
	}
	_, err = stream.CloseAndRecv()
	return err
}

func offerFiles(t *testing.T, s *Server) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(s.cfg.DataDir, "berth-offer-*.snap"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// An offer no install takes is let go after offerHold: its file and the
// store it read; a newer offer replaces an older one; the leader, which
// checks its own upload, refuses offers.
func TestOfferNoInstallTookIsReleased(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *testConfig) { c.DataDir = t.TempDir() })
	leader := tc.waitLeader()
	snap := saveSnapshot(t, tc, leader)
	if err := offerSnapshot(tc, leader, snap); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("an offer to the leader: %v, want FailedPrecondition", err)
	}
	f := tc.followers(leader)[0]
	for range 2 {
		if err := offerSnapshot(tc, f, snap); err != nil {
			t.Fatal(err)
		}
		if files := offerFiles(t, f); len(files) != 1 {
			t.Fatalf("offer files held: %q, want one (a newer offer replaces the older)", files)
		}
	}
	if err := offerSnapshot(tc, f, []byte("not a snapshot")); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("offer of a bad archive: %v, want InvalidArgument", err)
	}
	if files := offerFiles(t, f); len(files) != 0 {
		t.Fatalf("offer files after a refused offer: %q, want none (it released the older offer first)", files)
	}
	if err := offerSnapshot(tc, f, snap); err != nil {
		t.Fatal(err)
	}
	tc.clock.Advance(offerHold)
	testutil.WaitFor(t, 10*time.Second, func() error {
		if files := offerFiles(t, f); len(files) != 0 {
			return fmt.Errorf("offer files %q still held after offerHold", files)
		}
		return nil
	})
}
