package main

import (
	"bytes"
	"fmt"
	"strings"
	"sync/atomic"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// idMarker stands in for the node ID in the payload template. It has the
// length of a UUID (what real clients use as node IDs) and a byte that no
// other field of the node contains, so every place the ID lands in the
// encoding can be found and overwritten.
var idMarker = strings.Repeat("#", 36)

// idMarkerUses is how many fields of fullNode carry the ID: Id, Name and the
// fingerprint's Hostname.
const idMarkerUses = 3

// payloads mints raft log entries for the heaviest real command: a
// NodeRegister of a full node, each with a node ID never used before.
//
// Encoding a node of that size with deterministic map order costs the
// proposer several microseconds, which on a 2-core machine would be taken
// from raft and the FSM alike and blur the ratio. So the entry is encoded
// once with a placeholder ID and each proposal copies the bytes and writes
// its ID over the placeholder: IDs have a fixed length, so the result is the
// very encoding fsm.Encode produces (newPayloads checks that).
type payloads struct {
	template []byte
	at       []int // offsets of idMarker in template
	seq      atomic.Uint64
}

func newPayloads() (*payloads, error) {
	template, err := encodeRegister(idMarker)
	if err != nil {
		return nil, err
	}
	p := &payloads{template: template}
	for off := 0; ; {
		i := bytes.Index(template[off:], []byte(idMarker))
		if i < 0 {
			break
		}
		p.at = append(p.at, off+i)
		off += i + len(idMarker)
	}
	if len(p.at) != idMarkerUses {
		return nil, fmt.Errorf("payload template: node ID found %d times in the encoding, want %d", len(p.at), idMarkerUses)
	}
	id := nodeID(1 << 40)
	want, err := encodeRegister(id)
	if err != nil {
		return nil, err
	}
	if got := p.stamp(id); !bytes.Equal(got, want) {
		return nil, fmt.Errorf("payload template: stamping node ID %s does not reproduce fsm.Encode's %d bytes", id, len(want))
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

func encodeRegister(id string) ([]byte, error) {
	buf, err := fsm.Encode(fsm.NodeRegister, &pb.NodeRegisterCommand{Node: fullNode(id)})
	if err != nil {
		return nil, fmt.Errorf("payload template: %w", err)
	}
	return buf, nil
}

// fullNode is a node as a real client registers it: a complete host
// fingerprint and ten drivers, each with its own attributes. It is the same
// shape as fsm's BenchmarkApplyNodeRegister uses, so the FSM-only figure here
// and that benchmark agree.
func fullNode(id string) *pb.Node {
	attrs := map[string]string{}
	for i := range 30 {
		attrs[fmt.Sprintf("unique.platform.attr%02d", i)] = fmt.Sprintf("value-%d-of-a-realistic-length", i)
	}
	drivers := map[string]*pb.DriverInfo{}
	for i := range 10 {
		name := fmt.Sprintf("driver%d", i)
		dattrs := map[string]string{}
		for j := range 8 {
			dattrs[fmt.Sprintf("driver.%s.attr%d", name, j)] = fmt.Sprintf("v%d.%d.0", i, j)
		}
		drivers[name] = &pb.DriverInfo{
			Name:              name,
			Detected:          true,
			Healthy:           i%3 != 0,
			HealthDescription: "healthy",
			Version:           "1.2.3",
			Builtin:           i < 2,
			Path:              "/opt/berth/plugins/" + name,
			Attributes:        dattrs,
			UpdatedAt:         1_700_000_000_000_000_000,
		}
	}
	return &pb.Node{
		Id:              id,
		Name:            "client-" + id,
		Status:          pb.NodeStatus_NODE_STATUS_READY,
		StatusUpdatedAt: 1_700_000_000_000_000_000,
		HttpAddr:        "10.0.0.12:4646",
		RegisteredAt:    1_700_000_000_000_000_000,
		Fingerprint: &pb.NodeFingerprint{
			Hostname:     "host-" + id,
			Os:           "linux",
			Arch:         "amd64",
			CpuCores:     32,
			MemoryBytes:  128 << 30,
			BerthVersion: "0.1.0",
			Attributes:   attrs,
		},
		Drivers: drivers,
	}
}
