package apijson_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/reflect/protoreflect"

	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
)

// TestGrpcCodeIsGRPCs: pb.GrpcCode numbers every gRPC code as gRPC does
// (the conversion both ways is a plain cast), and the API writes its name.
func TestGrpcCodeIsGRPCs(t *testing.T) {
	ed := pb.GrpcCode(0).Descriptor()
	for c := codes.Canceled; c <= codes.Unauthenticated; c++ {
		word, ok := apijson.EnumWord(ed, protoreflect.EnumNumber(c))
		want := strings.ToLower(c.String())
		if !ok || strings.ReplaceAll(word, "-", "") != want {
			t.Errorf("gRPC code %d (%s): pb.GrpcCode's word is %q (%v), want %s's", c, c, word, ok, c)
		}
	}
	b, err := apijson.Marshal(&pb.VolumeError{Code: pb.GrpcCode(codes.Unavailable)})
	if err != nil || !strings.Contains(string(b), `"code": "unavailable"`) {
		t.Errorf("a VolumeError with code Unavailable is written %s (%v)", b, err)
	}
}
