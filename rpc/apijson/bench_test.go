package apijson_test

import (
	"fmt"
	"testing"

	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
)

// page is a full page of the node list (per_page=1000).
func page() []*pb.Node {
	nodes := make([]*pb.Node, 1000)
	for i := range nodes {
		nodes[i] = goldenNode()
		nodes[i].Id = fmt.Sprintf("%08x-0000-4000-8000-000000000000", i)
	}
	return nodes
}

func BenchmarkMarshalListPage(b *testing.B) {
	nodes := page()
	for b.Loop() {
		if _, err := apijson.MarshalList(nodes); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUnmarshalListPage(b *testing.B) {
	data, err := apijson.MarshalList(page())
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := apijson.UnmarshalList(data, func() *pb.Node { return &pb.Node{} }); err != nil {
			b.Fatal(err)
		}
	}
}
