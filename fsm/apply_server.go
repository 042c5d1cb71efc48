package fsm

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

// applyServerUpsert records a server's addresses, keeping its create index.
// An upsert that changes nothing writes nothing: leaders re-announce every
// member on each election, and that should not wake blocking queries.
//
// The command's server is owned here (decoded for this entry alone).
func applyServerUpsert(tx *writeTxn, cmd *pb.ServerUpsertCommand) error {
	s := cmd.GetServer()
	if s == nil {
		return fmt.Errorf("%w: no server", ErrInvalidCommand)
	}
	if s.GetId() == "" {
		return fmt.Errorf("%w: server has no ID (name %q)", ErrInvalidCommand, s.GetName())
	}
	existing, err := serversTable.first(tx, nil, s.GetId())
	if err != nil {
		return err
	}
	if existing == nil {
		s.CreateIndex = tx.index
		s.ModifyIndex = tx.index
		return serversTable.insert(tx, s)
	}
	s.CreateIndex = existing.GetCreateIndex()
	s.ModifyIndex = existing.GetModifyIndex()
	if proto.Equal(s, existing) {
		return nil
	}
	s.ModifyIndex = tx.index
	return serversTable.insert(tx, s)
}

// applyServerDelete forgets a server. Deleting an unknown server succeeds
// without writing, so a retried delete is not an error.
func applyServerDelete(tx *writeTxn, cmd *pb.ServerDeleteCommand) error {
	id := cmd.GetId()
	if id == "" {
		return fmt.Errorf("%w: no server ID", ErrInvalidCommand)
	}
	existing, err := serversTable.first(tx, nil, id)
	if err != nil {
		return err
	}
	if existing == nil {
		return nil
	}
	return serversTable.delete(tx, existing)
}
