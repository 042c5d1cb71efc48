package fsm

import (
	"fmt"

	"github.com/hashicorp/go-memdb"

	"berth.dev/berth/rpc/pb"
)

// ServerByID returns the server with the given raft server ID, or nil (and no
// error) if there is none. It adds a watch on that server to ws (which may be
// nil). The server must not be mutated.
func (r reader) ServerByID(ws memdb.WatchSet, id string) (*pb.ServerMember, error) {
	return first[*pb.ServerMember](r.db.Txn(false), ws, TableServers, id)
}

// Servers returns every server sorted by ID, adding a watch on the servers
// table to ws (which may be nil). The servers must not be mutated.
func (r reader) Servers(ws memdb.WatchSet) ([]*pb.ServerMember, error) {
	return list[*pb.ServerMember](r.db.Txn(false), ws, TableServers)
}

// insertServer stores s at the transaction's index. s must be owned by the
// caller and is not touched after this.
func insertServer(tx *writeTxn, s *pb.ServerMember) error {
	s.ModifyIndex = tx.index
	r, err := messageRow(s.GetId(), s)
	if err != nil {
		return err
	}
	if err := tx.insert(TableServers, r); err != nil {
		return fmt.Errorf("storing server %q: %w", s.GetId(), err)
	}
	tx.touch(TableServers)
	return nil
}

// deleteServer removes the server row r.
func deleteServer(tx *writeTxn, r *row) error {
	if err := tx.delete(TableServers, r); err != nil {
		return fmt.Errorf("deleting server %q: %w", r.key, err)
	}
	tx.touch(TableServers)
	return nil
}
