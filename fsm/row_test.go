package fsm

import (
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// TestRowDecodesOnceForConcurrentReaders reads a fresh row from many
// goroutines at once: every reader gets the node, and once the race is
// over every later read returns the one message that won.
func TestRowDecodesOnceForConcurrentReaders(t *testing.T) {
	want := testutil.HeavyNode("n1")
	raw, err := proto.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	r := rawRow("n1", raw)
	var wg sync.WaitGroup
	got := make([]*pb.Node, 16)
	for i := range got {
		wg.Go(func() {
			n, err := rowMessage[*pb.Node](r)
			if err != nil {
				t.Error(err)
			}
			got[i] = n
		})
	}
	wg.Wait()
	winner, err := rowMessage[*pb.Node](r)
	if err != nil || !proto.Equal(winner, want) {
		t.Fatalf("row decodes to %v (%v), want %v", winner, err, want)
	}
	for i, n := range got {
		if !proto.Equal(n, want) {
			t.Errorf("reader %d got %v", i, n)
		}
	}
	if again, _ := rowMessage[*pb.Node](r); again != winner {
		t.Error("a later read decoded the row again instead of sharing the first result")
	}
}

// TestRowDecodeErrorsNameTheRow covers rows that cannot be read as asked:
// bytes that do not decode (which Apply never stores) and a read as the
// wrong message type.
func TestRowDecodeErrorsNameTheRow(t *testing.T) {
	bad := rawRow("n1", []byte{0x0a, 0x01, 0xff})
	if _, err := rowMessage[*pb.Node](bad); err == nil || !strings.Contains(err.Error(), `decoding Node "n1"`) {
		t.Errorf("reading undecodable bytes: %v, want an error naming node n1", err)
	}
	good, err := messageRow("s1", &pb.ServerMember{Id: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rowMessage[*pb.Node](good); err == nil || !strings.Contains(err.Error(), `row "s1" holds a *pb.ServerMember`) {
		t.Errorf("reading a server row as a node: %v", err)
	}
}
