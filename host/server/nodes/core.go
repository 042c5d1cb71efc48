package nodes

import (
	"context"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
)

// Core is what the node loops need of the server core: the local state
// store and the leader's proposals.
type Core interface {
	State() *fsm.StateStore
	Apply(ctx context.Context, t fsm.MessageType, msg proto.Message) (uint64, error)
}
