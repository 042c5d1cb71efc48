package server

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// A second operator restore while one is under way is refused, naming the
// one under way, rather than racing it to raft (where it would take the
// first's checked store away and replace its state moments after the
// first's caller was told it was restored). The first restores as alone.
func TestConcurrentOperatorRestoreIsRefused(t *testing.T) {
	var logs lockedBuffer
	tc := newTestCluster(t, 1, func(c *testConfig) {
		c.DataDir = t.TempDir()
		c.Logger = hclog.New(&hclog.LoggerOptions{Name: "s1", Level: hclog.Info, Output: &logs})
	})
	s := tc.servers[0]
	kept, dropped := testNode("kept"), testNode("dropped")
	if _, err := tc.register(s, kept); err != nil {
		t.Fatal(err)
	}
	snap := saveSnapshot(t, tc, s)
	if _, err := tc.register(s, dropped); err != nil {
		t.Fatal(err)
	}

	// The first restore sends its first bytes and holds its upload open.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, err := pb.NewOperatorClient(tc.conn(s)).SnapshotRestore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Send(&pb.SnapshotChunk{Data: snap[:100]}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		// The leader buffers an upload in its data directory.
		if m, _ := filepath.Glob(filepath.Join(s.cfg.DataDir, "berth-restore-*.snap")); len(m) == 0 {
			return errors.New("the first restore's upload has not begun on the leader")
		}
		return nil
	})

	err = restoreSnapshot(tc, s, snap)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "another snapshot restore is in progress") ||
		!strings.Contains(err.Error(), "is still uploading or restoring") {
		t.Fatalf("a restore during another: %v; want FailedPrecondition naming the restore in progress", err)
	}
	if n, _ := s.State().NodeByID(nil, dropped.GetId()); n == nil {
		t.Fatal("the refused restore changed the state")
	}

	for rest := snap[100:]; len(rest) > 0; {
		n := min(len(rest), 1000)
		if err := first.Send(&pb.SnapshotChunk{Data: rest[:n]}); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	if _, err := first.CloseAndRecv(); err != nil {
		t.Fatalf("the first restore: %v", err)
	}
	if n, _ := s.State().NodeByID(nil, dropped.GetId()); n != nil {
		t.Fatal("the first restore did not restore the snapshot")
	}
	var checked int
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "restored state from snapshot") && strings.Contains(line, "checked_before=true") {
			checked++
		}
	}
	if checked != 1 {
		t.Fatalf("the first restore swapped in the store it checked %d times, want once", checked)
	}

	// Once it has answered, the next restore runs.
	if err := restoreSnapshot(tc, s, snap); err != nil {
		t.Fatalf("a restore after the first answered: %v", err)
	}
}
