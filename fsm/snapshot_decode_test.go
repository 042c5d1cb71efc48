package fsm_test

import (
	"bytes"
	"fmt"
	"testing"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// restoreOutcome restores stream into a new FSM with the given decode
// workers and returns the error, or the restored state's dump.
func restoreOutcome(t *testing.T, workers int, stream []byte) string {
	t.Helper()
	defer fsm.SetDecodeWorkers(workers)()
	f := fsm.New(nil)
	if err := restoreBytes(f, stream); err != nil {
		return "error: " + err.Error()
	}
	dump, err := dumpState(f.State())
	if err != nil {
		t.Fatal(err)
	}
	return dump
}

// Records decoded on several cores are stored, and refused, exactly as
// records read one by one: the same state from a whole stream, and the
// same error naming the same record from every cut and every corrupted
// byte, across batch boundaries.
func TestParallelDecodeMatchesSequential(t *testing.T) {
	f := fsm.New(nil)
	// Enough rows for several batches (fsm decodes 256 records a batch).
	for i := range 700 {
		applyOK(t, f, uint64(i+1), fsm.NodeRegister,
			registerCmd(fmt.Sprintf("id-%04d", i), fmt.Sprintf("n%d", i), pb.NodeStatus_NODE_STATUS_READY))
	}
	stream := snapshotBytes(t, f)
	whole := restoreOutcome(t, 1, stream)
	if bytes.HasPrefix([]byte(whole), []byte("error: ")) {
		t.Fatalf("sequential restore of the whole stream: %s", whole)
	}
	if got := restoreOutcome(t, 4, stream); got != whole {
		t.Fatalf("parallel restore of the whole stream differs from sequential:\n%s\nwant\n%s", got, whole)
	}
	check := func(what string, s []byte) {
		t.Helper()
		want := restoreOutcome(t, 1, s)
		for _, workers := range []int{2, 4} {
			if got := restoreOutcome(t, workers, s); got != want {
				t.Fatalf("%s, %d decoders: %.300s\nsequential: %.300s", what, workers, got, want)
			}
		}
	}
	step := max(1, len(stream)/150)
	for cut := 0; cut < len(stream); cut += step {
		check(fmt.Sprintf("cut at %d of %d", cut, len(stream)), stream[:cut])
	}
	for at := 0; at < len(stream); at += step {
		bad := bytes.Clone(stream)
		bad[at] ^= 0x5a
		check(fmt.Sprintf("byte %d of %d changed", at, len(stream)), bad)
	}
	// A record after the end: the end counts, then one more record.
	check("a record after the end", append(bytes.Clone(stream), stream[len(stream)-8:]...))
}

// BenchmarkRestoreDecoders restores 10,000 full nodes with the records
// decoded where they are stored ("sequential", the default on 2 cores) and
// by two decoders ("parallel", the default on 4).
func BenchmarkRestoreDecoders(b *testing.B) {
	f := fsm.New(nil)
	for i := range 10_000 {
		cmd := &pb.NodeRegisterCommand{Node: fullNode(fmt.Sprintf("node-%05d", i))}
		if res := applyAt(f, uint64(i+1), mustEncode(b, fsm.NodeRegister, cmd)); res.Err != nil {
			b.Fatal(res.Err)
		}
	}
	snap := snapshotBytes(b, f)
	for _, c := range []struct {
		name    string
		workers int
	}{{"sequential", 1}, {"parallel", 2}} {
		b.Run(c.name, func(b *testing.B) {
			defer fsm.SetDecodeWorkers(c.workers)()
			b.SetBytes(int64(len(snap)))
			for range b.N {
				if err := restoreBytes(fsm.New(nil), snap); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
