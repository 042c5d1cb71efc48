package endpoints

import (
	"github.com/hashicorp/go-memdb"

	"berth.dev/berth/rpc/pb"
)

// nothingNewIndex is the index a client's alloc watch answers when the
// answer holds nothing the client lacks: a node with no allocs, whose
// client holds none, answers no later than the index the client already
// has, so its blocking query keeps waiting.
//
// Such a node has no row in node_alloc_index, and a memdb read of a missing
// row watches the nearest node of the index's radix tree above where the
// row would be: every placement on a node whose key shares that prefix
// wakes it (while the table is small, every placement anywhere), and the
// index answered, the allocs table's, has moved. Each idle node's watch
// then answered an empty list and was asked again at once: in the
// simulator's 1,000 volume jobs on 1,000 nodes, ~61 watch answers per node
// for the one alloc each received, 11% of the simulator's CPU and a share
// of every server's. The client's own placement still wakes it: the row
// it creates has a raft index above any the client saw. A client holding
// allocs (its node's row collected with them) still gets the table's index
// and the empty list, and a server behind the client (an index below it)
// still answers its own, lower index. A run whose answer is returned
// whatever its index (ws nil: no min index, or the read after a restore,
// which must answer the restored state's index) is left alone.
func nothingNewIndex(ws memdb.WatchSet, index uint64, req *pb.ClientAllocsRequest, resp *pb.ClientAllocsResponse) uint64 {
	minIndex := req.GetQuery().GetMinIndex()
	if ws == nil || minIndex == 0 || len(resp.Allocs) > 0 || len(req.GetKnown()) > 0 {
		return index
	}
	return min(index, minIndex)
}

// noOperatorClaimIndex is nothingNewIndex for a client's list of its
// node's operator claims: an answer listing none, to a client that holds
// none (holds_none), answers no later than the client's min index, so its
// blocking query keeps waiting. The list watches the node's range of the
// claims' node index, which for a node with no claim is the radix node
// above it, and answers the claims table's index: every claim change
// nearby (while the table is small, any) woke every such node with an
// empty list, ~70 answers per node in the simulator's 1,000 volume jobs,
// 17% of its CPU. A claim made for the node still wakes it (the list is
// no longer empty); a client holding an operator claim is told of its
// removal as before.
func noOperatorClaimIndex(ws memdb.WatchSet, index uint64, req *pb.ClientClaimsRequest, resp *pb.ClientClaimsResponse) uint64 {
	minIndex := req.GetQuery().GetMinIndex()
	if ws == nil || minIndex == 0 || !req.GetHoldsNone() || len(resp.Claims) > 0 {
		return index
	}
	return min(index, minIndex)
}
