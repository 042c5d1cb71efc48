package endpoints

import (
	"context"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/rpc/pb"
)

// hookedProposer runs before ahead of each proposal and after once it
// applied.
type hookedProposer struct {
	Proposer
	before, after func(fsm.MessageType, proto.Message)
}

func (p *hookedProposer) Apply(ctx context.Context, t fsm.MessageType, msg proto.Message) (uint64, error) {
	if p.before != nil {
		p.before(t, msg)
	}
	idx, err := p.Proposer.Apply(ctx, t, msg)
	if err == nil && p.after != nil {
		p.after(t, msg)
	}
	return idx, err
}

// The node registers as soon as its plugin made a volume, before the
// create's answer is recorded: a registration that read the volume
// pending, then applied its promotion after the create recorded it ready
// with the plugin's capacity, overwrote that row with its stale copy
// (capacity 0: the acceptance test's "Capacity = -"). The promotion
// applies only while the volume is still pending as read; the create's
// answer stands.
func TestHostVolumePromotionDoesNotOverwriteCreateAnswer(t *testing.T) {
	e, s, node := hostVolumeEndpoint(t)
	ctx := context.Background()
	promoteRead, createRecorded := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e.s.Proposer = &hookedProposer{Proposer: s, after: func(mt fsm.MessageType, msg proto.Message) {
		if c, ok := msg.(*pb.HostVolumeRegisterCommand); ok && mt == fsm.HostVolumeRegister && c.GetMustExist() {
			once.Do(func() { close(createRecorded) })
		}
	}}
	// The registration's server: its promotion is proposed once it read
	// the volume pending, and applies after the create's answer.
	reg := &api{Deps: Deps{Reader: s, Cluster: s, Clock: clock.Real{}, Logger: hclog.NewNullLogger(),
		Proposer: &hookedProposer{Proposer: s, before: func(mt fsm.MessageType, _ proto.Message) {
			if mt == fsm.HostVolumeRegister {
				close(promoteRead)
				<-createRecorded
			}
		}}}}
	promoted := make(chan error, 1)
	node.answer = func(_ bool, v *pb.HostVolume) (*pb.HostVolumeOnNodeResponse, error) {
		path := "/vols/" + v.GetId()
		n := &pb.Node{Id: hvNode1, Name: "1", HostVolumes: map[string]*pb.HostVolumeInfo{v.GetName(): {Id: v.GetId(), Path: path}}}
		go func() { promoted <- promotePendingHostVolumes(ctx, reg, n) }()
		<-promoteRead
		return &pb.HostVolumeOnNodeResponse{HostPath: path, CapacityBytes: 1 << 20}, nil
	}
	resp, err := e.Create(ctx, newHostVolume("data"))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-promoted; err != nil {
		t.Fatalf("the registration's promotion: %v, want it to leave the ready volume be", err)
	}
	id := resp.GetVolume().GetId()
	if v := storedHostVolume(t, s, id); v.GetState() != pb.HostVolumeState_HOST_VOLUME_STATE_READY || v.GetCapacityBytes() != 1<<20 || v.GetHostPath() != "/vols/"+id {
		t.Fatalf("stored after the create and a racing registration: %v, want ready with 1 MiB", v)
	}
}
