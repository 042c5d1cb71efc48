package testutil

import (
	"fmt"
	"net/http"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/rpc/errcode"
)

// CheckSentinelCodes asserts that each sentinel, wrapped the way callers wrap
// it (with the name of the object), leaves the server as a gRPC status with
// the code in want and the whole wrapped text, and that the HTTP API answers
// it with its status: never 500 for a refusal, 500 only for the codes that
// mean a fault (Internal, DataLoss). Packages list their sentinels here so a
// sentinel's code is a decision written down beside it; the walker in
// rpc/errcode makes sure none is forgotten.
func CheckSentinelCodes(t testing.TB, want map[error]codes.Code) {
	t.Helper()
	for sentinel, code := range want {
		wrapped := fmt.Errorf("volume v1 on node n1: %w", sentinel)
		st := status.Convert(errcode.Status(wrapped))
		if st.Code() != code {
			t.Errorf("%q: code %s, want %s", sentinel, st.Code(), code)
		}
		if st.Message() != wrapped.Error() {
			t.Errorf("%q: message %q, want %q", sentinel, st.Message(), wrapped.Error())
		}
		httpStatus := errcode.HTTPStatus(st.Code())
		fault := code == codes.Internal || code == codes.DataLoss
		if (httpStatus == http.StatusInternalServerError) != fault {
			t.Errorf("%q: %s answers HTTP %d", sentinel, code, httpStatus)
		}
	}
}
