package endpoints

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

// redactNode answers the node without its secret hash, every other field
// (and a newer server's unknown fields) as they are, sharing them rather
// than copying (a node's drivers carry their task schemas); the stored
// node is not changed.
func TestRedactNodeIsAShallowCopyWithoutTheHash(t *testing.T) {
	n := &pb.Node{
		Id: "n1", Name: "vm", Status: pb.NodeStatus_NODE_STATUS_READY, HttpAddr: "127.0.0.1:4646",
		Fingerprint: &pb.NodeFingerprint{Hostname: "vm", Attributes: map[string]string{"a": "b"}},
		Drivers:     map[string]*pb.DriverInfo{"exec": {Name: "exec", Healthy: true}},
		Meta:        map[string]string{"rack": "r1"}, CreateIndex: 3, ModifyIndex: 4,
		SecretHash: []byte{1, 2, 3},
	}
	n.ProtoReflect().SetUnknown(protowire.AppendTag(nil, 999, protowire.VarintType))
	n.ProtoReflect().SetUnknown(protowire.AppendVarint(n.ProtoReflect().GetUnknown(), 7))
	stored := proto.Clone(n).(*pb.Node)

	r := redactNode(n)
	want := proto.Clone(n).(*pb.Node)
	want.SecretHash, want.HasSecret = nil, true
	if !proto.Equal(r, want) {
		t.Fatalf("redacted %v, want %v", r, want)
	}
	if !proto.Equal(n, stored) {
		t.Fatalf("the stored node changed: %v", n)
	}
	if r.GetFingerprint() != n.GetFingerprint() || r.GetDrivers()["exec"] != n.GetDrivers()["exec"] {
		t.Fatal("redactNode copied the node's messages instead of sharing them")
	}
	if plain := (&pb.Node{Id: "n2"}); redactNode(plain) != plain {
		t.Fatal("a node without a secret is answered as stored")
	}
}
