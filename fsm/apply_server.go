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
	stored, err := tx.row(TableServers, s.GetId())
	if err != nil {
		return err
	}
	if stored == nil {
		s.CreateIndex = tx.index
		return insertServer(tx, s)
	}
	existing, err := rowMessage[*pb.ServerMember](stored)
	if err != nil {
		return err
	}
	s.CreateIndex = existing.GetCreateIndex()
	s.ModifyIndex = existing.GetModifyIndex()
	if proto.Equal(s, existing) {
		return nil
	}
	return insertServer(tx, s)
}

// applyServerDelete forgets a server. Deleting an unknown server succeeds
// without writing, so a retried delete is not an error.
func applyServerDelete(tx *writeTxn, cmd *pb.ServerDeleteCommand) error {
	id := cmd.GetId()
	if id == "" {
		return fmt.Errorf("%w: no server ID", ErrInvalidCommand)
	}
	existing, err := tx.row(TableServers, id)
	if err != nil {
		return err
	}
	if existing == nil {
		return nil
	}
	return deleteServer(tx, existing)
}
