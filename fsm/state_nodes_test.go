package fsm_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/hashicorp/go-memdb"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

func nodeIDs(nodes []*pb.Node) []string {
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i] = n.GetId()
	}
	return ids
}

// TestNodesPage pages through nodes with a filter: each page holds at most
// the limit, the next token is the next node the filter keeps (so no page
// is empty), the last page has no token, and the pages together are the
// filtered list.
func TestNodesPage(t *testing.T) {
	f := fsm.New(testLogger(t))
	var ready []string
	for i := range 10 {
		status := pb.NodeStatus_NODE_STATUS_READY
		if i%3 == 0 {
			status = pb.NodeStatus_NODE_STATUS_DOWN
		} else {
			ready = append(ready, fmt.Sprintf("n%02d", i))
		}
		applyOK(t, f, uint64(i+1), fsm.NodeRegister, registerCmd(fmt.Sprintf("n%02d", i), "", status))
	}
	isReady := func(n *pb.Node) bool { return n.GetStatus() == pb.NodeStatus_NODE_STATUS_READY }
	st := f.State()

	var all, tokens []string
	from := ""
	for range 10 {
		nodes, next, err := st.NodesPage(nil, from, 4, isReady)
		if err != nil {
			t.Fatal(err)
		}
		if len(nodes) == 0 || len(nodes) > 4 {
			t.Fatalf("page from %q has %d nodes, want 1 to 4", from, len(nodes))
		}
		all = append(all, nodeIDs(nodes)...)
		tokens = append(tokens, next)
		if next == "" {
			break
		}
		from = next
	}
	if !slices.Equal(all, ready) {
		t.Errorf("pages hold %v, want the ready nodes %v", all, ready)
	}
	if want := []string{"n07", ""}; !slices.Equal(tokens, want) {
		t.Errorf("next tokens %q, want %q", tokens, want)
	}

	// No limit and no filter: every node, no token.
	nodes, next, err := st.NodesPage(nil, "", 0, nil)
	if err != nil || len(nodes) != 10 || next != "" {
		t.Errorf("unlimited page: %d nodes, next %q, %v; want 10, none", len(nodes), next, err)
	}
	// A token between two IDs starts at the next one.
	nodes, next, err = st.NodesPage(nil, "n035", 2, nil)
	if got := nodeIDs(nodes); err != nil || !slices.Equal(got, []string{"n04", "n05"}) || next != "n06" {
		t.Errorf("page from n035: %v next %q (%v), want [n04 n05] next n06", got, next, err)
	}
	// Past the end: nothing.
	if nodes, next, err = st.NodesPage(nil, "n99", 2, nil); err != nil || len(nodes) != 0 || next != "" {
		t.Errorf("page past the end: %v next %q (%v)", nodeIDs(nodes), next, err)
	}

	// A page watches the table: a node registered after it wakes it.
	ws := memdb.NewWatchSet()
	if _, _, err := st.NodesPage(ws, "", 2, nil); err != nil {
		t.Fatal(err)
	}
	if fired(ws) {
		t.Fatal("watch fired before any change")
	}
	applyOK(t, f, 20, fsm.NodeRegister, registerCmd("n50", "", pb.NodeStatus_NODE_STATUS_READY))
	if !fired(ws) {
		t.Error("a registration did not wake a watch on a page of nodes")
	}
}
