package fsm

import (
	"fmt"

	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// applyAllocClientUpdates applies an AllocClientUpdate entry: one node's
// updates (applyAllocClientUpdate), or a batch of many nodes' (batch set,
// applyAllocClientUpdateBatch).
func applyAllocClientUpdates(tx *writeTxn, cmd *pb.AllocClientUpdateCommand) error {
	if len(cmd.GetBatch()) == 0 {
		return applyAllocClientUpdate(tx, cmd)
	}
	return applyAllocClientUpdateBatch(tx, cmd)
}

// applyAllocClientUpdateBatch applies the parts of a batched
// AllocClientUpdate entry in order, each as if it were its own command:
// a part refused (its node not registered, an alloc on another node, a
// malformed part) changes nothing and the next part is applied. The
// entry's result, an AllocClientUpdateBatchResult, names each refused
// part with its error's code and text, so the leader answers each node
// what it would have answered it alone.
//
// A part that fails after writing (never, for a refusal: every apply
// refuses before it writes) fails the whole entry, so no server keeps
// half a part; the batch it came in is then applied entry by entry and
// this entry refused whole, and the leader proposes each of its parts
// again as its own command (the endpoints' allocUpdateBatcher), so only
// the failing part's node is refused.
func applyAllocClientUpdateBatch(tx *writeTxn, cmd *pb.AllocClientUpdateCommand) error {
	if cmd.GetNodeId() != "" || len(cmd.GetUpdates()) > 0 || len(cmd.GetEvals()) > 0 || cmd.GetReceivedAt() != 0 {
		return fmt.Errorf("%w: a batched client update carries its nodes' updates only in its parts", ErrInvalidCommand)
	}
	res := &pb.AllocClientUpdateBatchResult{}
	for i, part := range cmd.GetBatch() {
		written := tx.writes
		var err error
		if len(part.GetBatch()) > 0 {
			err = fmt.Errorf("%w: part %d of %d of a batched client update (node %q) holds a batch of its own", ErrInvalidCommand, i+1, len(cmd.GetBatch()), part.GetNodeId())
		} else {
			err = applyAllocClientUpdate(tx, part)
		}
		if err == nil {
			continue
		}
		if tx.writes != written {
			return fmt.Errorf("part %d of %d of a batched client update (node %q) failed after writing: %w", i+1, len(cmd.GetBatch()), part.GetNodeId(), err)
		}
		res.Refusals = append(res.Refusals, &pb.AllocClientUpdateRefusal{Part: uint32(i), Code: uint32(errcode.Code(err)), Error: err.Error()})
	}
	tx.result = res
	return nil
}
