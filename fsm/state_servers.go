package fsm

import (
	"github.com/hashicorp/go-memdb"

	"berth.dev/berth/rpc/pb"
)

// ServerByID returns the server with the given raft server ID, or nil (and no
// error) if there is none. It adds a watch on that server to ws (which may be
// nil). The server must not be mutated.
func (r reader) ServerByID(ws memdb.WatchSet, id string) (*pb.ServerMember, error) {
	return serversTable.first(r, ws, id)
}

// Servers returns every server sorted by ID, adding a watch on the servers
// table to ws (which may be nil). The servers must not be mutated.
func (r reader) Servers(ws memdb.WatchSet) ([]*pb.ServerMember, error) {
	return serversTable.list(r, ws)
}
