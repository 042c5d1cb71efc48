package main

import (
	"bytes"
	_ "embed"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
)

// devNodeJSON is the node a dev agent registered, exactly as
// `GET /v1/node/{id}` served it (rpc/apijson of pb.Node). Regenerate it
// whenever the client starts reporting more (drivers, CSI plugins,
// attributes), from the repository root:
//
//	go build -o /tmp/berth-capture/berth .
//	/tmp/berth-capture/berth run -dev -data-dir /tmp/berth-capture/data &
//	pid=$!                               # the agent itself, to stop it by PID
//	curl -s 127.0.0.1:7646/v1/nodes      # repeat until it lists the node; note its "id"
//	curl -s 127.0.0.1:7646/v1/node/ID    # repeat until "drivers" appears: the client
//	                                     # re-registers once its drivers are fingerprinted
//	curl -s 127.0.0.1:7646/v1/node/ID > bench/testdata/dev-node.json
//	kill -TERM $pid; rm -rf /tmp/berth-capture
//
// If ports 7646-7648 are taken, run `berth run -dev -config FILE` with an
// agent file that sets other `ports { http = … rpc = … raft = … }` (plus
// data_dir, server and client enabled) and curl that HTTP port. Then
// `go test ./bench/` checks that the file still decodes into a
// registration berth's FSM accepts.
//
//go:embed testdata/dev-node.json
var devNodeJSON []byte

// payloadSpec is one command the raft section measures: a NodeRegister of
// the node its node func returns for a given ID.
type payloadSpec struct {
	// name labels the payload in the report ("real", "stress").
	name string
	// about says in a few words what the node is, for the report's notes.
	about string
	node  func(id string) *pb.Node
	// floor: also measure the go-memdb floor (floorKind) with it.
	floor bool
}

// realPayload is the headline: the node a dev agent registers, so the
// figures lead with what berth actually proposes.
func realPayload() (payloadSpec, error) {
	captured, err := devNode()
	if err != nil {
		return payloadSpec{}, err
	}
	return payloadSpec{
		name: "real",
		about: fmt.Sprintf("the node a dev agent registers (testdata/dev-node.json: %s, %s%s)",
			countText(len(captured.GetFingerprint().GetAttributes()), "fingerprint attribute"),
			countText(len(captured.GetDrivers()), "driver"), driverNames(captured)),
		node: func(id string) *pb.Node {
			n := proto.Clone(captured).(*pb.Node)
			n.Id = id
			return n
		},
		floor: true,
	}, nil
}

// stressPayload is a node far heavier than berth's clients send today, to
// show where decoding large fingerprints would take the FSM.
func stressPayload() payloadSpec {
	return payloadSpec{
		name:  "stress",
		about: "a synthetic heavy node (30 fingerprint attributes, 10 drivers × 8 attributes), far more than a client sends today",
		node:  stressNode,
	}
}

// devNode decodes the captured node and turns it back into what the server
// proposes: the create and modify indexes are the FSM's to assign, so a
// registration carries none.
func devNode() (*pb.Node, error) {
	n := &pb.Node{}
	if err := apijson.Unmarshal(devNodeJSON, n); err != nil {
		return nil, fmt.Errorf("testdata/dev-node.json: %w", err)
	}
	if n.GetId() == "" || n.GetName() == "" || n.GetFingerprint() == nil {
		return nil, fmt.Errorf("testdata/dev-node.json: node id %q, name %q, fingerprint present %t: not a registered node",
			n.GetId(), n.GetName(), n.GetFingerprint() != nil)
	}
	if n.GetStatus() != pb.NodeStatus_NODE_STATUS_READY {
		return nil, fmt.Errorf("testdata/dev-node.json: node %s has status %s, want %s as the server registers it",
			n.GetId(), n.GetStatus(), pb.NodeStatus_NODE_STATUS_READY)
	}
	n.CreateIndex, n.ModifyIndex = 0, 0
	return n, nil
}

// driverNames is " (mock, raw_exec)" for a node's drivers, "" for none.
func driverNames(n *pb.Node) string {
	if len(n.GetDrivers()) == 0 {
		return ""
	}
	return " (" + strings.Join(slices.Sorted(maps.Keys(n.GetDrivers())), ", ") + ")"
}

// idMarker stands in for the node ID in the payload template. It has the
// length of a UUID (what real clients use as node IDs) and a byte that no
// other field of the node contains, so every place the ID lands in the
// encoding can be found and overwritten.
var idMarker = strings.Repeat("#", 36)

// payloads mints raft log entries of one payloadSpec, each with a node ID
// never used before.
//
// Encoding a node with deterministic map order costs the proposer several
// microseconds, which on a 2-core machine would be taken from raft and the
// FSM alike and blur the ratio. So the entry is encoded once with a
// placeholder ID and each proposal copies the bytes and writes its ID over
// the placeholder, wherever the node carries it (the ID field, and the stress
// node's name and hostname): IDs have a fixed length, so the result is the
// very encoding fsm.Encode produces (newPayloads checks that).
type payloads struct {
	spec     payloadSpec
	template []byte
	at       []int // offsets of idMarker in template
	seq      atomic.Uint64
}

func newPayloads(spec payloadSpec) (*payloads, error) {
	template, err := encodeRegister(spec, idMarker)
	if err != nil {
		return nil, err
	}
	p := &payloads{spec: spec, template: template}
	for off := 0; ; {
		i := bytes.Index(template[off:], []byte(idMarker))
		if i < 0 {
			break
		}
		p.at = append(p.at, off+i)
		off += i + len(idMarker)
	}
	if len(p.at) == 0 {
		return nil, fmt.Errorf("%s payload template: node ID placeholder not found in the encoding", spec.name)
	}
	id := nodeID(1 << 40)
	want, err := encodeRegister(spec, id)
	if err != nil {
		return nil, err
	}
	if got := p.stamp(id); !bytes.Equal(got, want) {
		return nil, fmt.Errorf("%s payload template: stamping node ID %s at %d place(s) does not reproduce fsm.Encode's %d bytes",
			spec.name, id, len(p.at), len(want))
	}
	return p, nil
}

// next returns a fresh entry (raft keeps it, so it is never reused)
// registering a node no earlier entry registered.
func (p *payloads) next() []byte {
	return p.stamp(nodeID(p.seq.Add(1)))
}

// size is the length of every entry in bytes.
func (p *payloads) size() int { return len(p.template) }

func (p *payloads) stamp(id string) []byte {
	buf := bytes.Clone(p.template)
	for _, off := range p.at {
		copy(buf[off:], id)
	}
	return buf
}

// nodeID formats seq as a UUID-shaped ID of idMarker's length.
func nodeID(seq uint64) string {
	return fmt.Sprintf("00000000-0000-4000-8000-%012x", seq&(1<<48-1))
}

func encodeRegister(spec payloadSpec, id string) ([]byte, error) {
	buf, err := fsm.Encode(fsm.NodeRegister, &pb.NodeRegisterCommand{Node: spec.node(id)})
	if err != nil {
		return nil, fmt.Errorf("%s payload template: %w", spec.name, err)
	}
	return buf, nil
}

// stressNode is testutil.HeavyNode: a host fingerprint with 30 attributes
// and ten drivers, each with its own attributes, about 5 KB encoded — the
// node fsm's BenchmarkApplyNodeRegister uses, so the FSM-only figure here
// and that benchmark agree.
func stressNode(id string) *pb.Node { return testutil.HeavyNode(id) }
