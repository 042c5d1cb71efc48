package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protodelim"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

func saveSnapshot(t *testing.T, tc *testCluster, s *Server) []byte {
	t.Helper()
	stream, err := pb.NewOperatorClient(tc.conn(s)).SnapshotSave(context.Background(), &pb.SnapshotSaveRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	for {
		c, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return buf.Bytes()
		}
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(c.GetData())
	}
}

func restoreSnapshot(tc *testCluster, s *Server, data []byte) error {
	stream, err := pb.NewOperatorClient(tc.conn(s)).SnapshotRestore(context.Background())
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

func TestRestoreFromAnotherClusterKeepsMembership(t *testing.T) {
	// A snapshot of a different, single-server cluster holding one node.
	other := newTestCluster(t, 1)
	foreign := testNode("foreign")
	if _, err := other.register(other.servers[0], foreign); err != nil {
		t.Fatal(err)
	}
	snap := saveSnapshot(t, other, other.servers[0])

	tc := newTestCluster(t, 3)
	leader := tc.waitLeader()
	local := testNode("local")
	if _, err := tc.register(leader, local); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		for _, s := range tc.servers {
			if m, _ := leader.State().ServerByID(nil, s.ID()); m == nil {
				return fmt.Errorf("%s not recorded yet", s.cfg.Name)
			}
		}
		return nil
	})
	// Restore through a follower: forwarded to the leader.
	if err := restoreSnapshot(tc, tc.followers(leader)[0], snap); err != nil {
		t.Fatalf("restore: %v", err)
	}
	// The leader's heartbeat timers follow the restored nodes; followers
	// run none. (Leadership may move under a loaded machine; whoever leads
	// then arms its timers from the restored state.)
	testutil.WaitFor(t, 10*time.Second, func() error {
		for _, s := range tc.live() {
			restored, dropped := s.heartbeats.Tracked(foreign.GetId()), s.heartbeats.Tracked(local.GetId())
			if dropped || restored != s.leaderReady() {
				return fmt.Errorf("%s (leader %t): restored node tracked %t, dropped node tracked %t", s.cfg.Name, s.IsLeader(), restored, dropped)
			}
		}
		return nil
	})
	for _, s := range tc.servers {
		waitNode(t, s, foreign.GetId(), pb.NodeStatus_NODE_STATUS_READY)
		if n, _ := s.State().NodeByID(nil, local.GetId()); n != nil {
			t.Fatalf("%s kept a node the restored state does not have", s.cfg.Name)
		}
	}
	// Each of today's three servers is still recorded with its address, on
	// every server (the leader of the moment records them again after the
	// restore: wait for that write to reach each state, which on a loaded
	// machine may be a leader other than the first), and writes still forward.
	testutil.WaitFor(t, 10*time.Second, func() error {
		for _, holder := range tc.live() {
			for _, s := range tc.servers {
				m, err := holder.State().ServerByID(nil, s.ID())
				if err != nil || m == nil || m.GetRpcAddr() != s.cfg.RPCAddr {
					return fmt.Errorf("%s's state after restore: %s recorded as %v, %v", holder.cfg.Name, s.cfg.Name, m, err)
				}
			}
		}
		return nil
	})
	leader = tc.waitLeader()
	for _, s := range tc.followers(leader) {
		if _, err := tc.register(s, testNode("after-restore-"+s.cfg.Name)); err != nil {
			t.Fatalf("write via %s after restore: %v", s.cfg.Name, err)
		}
	}
}

func TestRestoreRefusesDamagedArchives(t *testing.T) {
	tc := newTestCluster(t, 1)
	s := tc.servers[0]
	n := testNode("keep")
	if _, err := tc.register(s, n); err != nil {
		t.Fatal(err)
	}
	good := saveSnapshot(t, tc, s)
	cases := map[string][]byte{
		"empty":     {},
		"truncated": good[:len(good)-1],
		"corrupted": append(append([]byte{}, good[:40]...), append([]byte{good[40] ^ 1}, good[41:]...)...),
		"not berth": bytes.Repeat([]byte("x"), len(good)),
	}
	for name, data := range cases {
		err := restoreSnapshot(tc, s, data)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s archive: %v, want InvalidArgument", name, err)
		}
	}
	waitNode(t, s, n.GetId(), pb.NodeStatus_NODE_STATUS_READY)
}

func TestArchiveRoundTripOnDisk(t *testing.T) {
	tc := newTestCluster(t, 1)
	data := saveSnapshot(t, tc, tc.servers[0])
	path := filepath.Join(t.TempDir(), "a.snap")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	meta, state, err := readArchive(f)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(state)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(body)) != meta.Size || meta.Index == 0 {
		t.Fatalf("archive state %d bytes at index %d, meta says %d", len(body), meta.Index, meta.Size)
	}
}

// TestRestoreArchiveRefusalCarriesItsCode reads archives whose checksum is
// right: a state from a newer snapshot version is FailedPrecondition (this
// server must be upgraded); a state that is not a snapshot and a file that
// is not a berth archive are InvalidArgument (the operator's file is bad;
// the cluster lost nothing, so not DataLoss). Each error
// names what was refused.
func TestRestoreArchiveRefusalCarriesItsCode(t *testing.T) {
	newer := &bytes.Buffer{}
	if _, err := protodelim.MarshalTo(newer, &pb.SnapshotHeader{Version: fsm.SnapshotVersion + 1}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		state   []byte
		magic   string
		want    codes.Code
		is      error
		mention string
	}{
		{"newer snapshot version", newer.Bytes(), archiveMagic, codes.FailedPrecondition, fsm.ErrSnapshotVersion, "holds a state this server cannot restore"},
		{"not a snapshot", []byte("junk"), archiveMagic, codes.InvalidArgument, ErrBadArchive, "cannot be restored: corrupt snapshot"},
		{"not a berth archive", newer.Bytes(), "NOTBERTH", codes.InvalidArgument, ErrBadArchive, "not a berth snapshot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var archive bytes.Buffer
			meta := &raft.SnapshotMeta{Version: 1, ID: "x", Index: 5, Term: 1, Size: int64(len(tc.state))}
			if err := writeArchive(&archive, meta, bytes.NewReader(tc.state)); err != nil {
				t.Fatal(err)
			}
			data := archive.Bytes()
			copy(data, tc.magic)
			sum := sha256.Sum256(data[:len(data)-sha256.Size])
			copy(data[len(data)-sha256.Size:], sum[:])
			path := filepath.Join(t.TempDir(), "a.snap")
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			_, _, err = readArchive(f)
			if !errors.Is(err, tc.is) || errcode.Code(err) != tc.want || !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("readArchive = %v (code %s), want %v, code %s, mentioning %q", err, errcode.Code(err), tc.is, tc.want, tc.mention)
			}
		})
	}
}
