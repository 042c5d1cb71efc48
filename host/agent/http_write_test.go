package agent

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"berth.dev/berth/rpc/pb"
)

// goneWriter is a ResponseWriter whose caller went away: every write fails.
type goneWriter struct{ *httptest.ResponseRecorder }

func (goneWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

var _ http.ResponseWriter = goneWriter{}

// A write failing after the headers are sent is a caller gone away: the
// handler has answered, so no error comes back to be logged as a 500 and
// answered a second time.
func TestWriteProtoAfterHeadersIsNotAnError(t *testing.T) {
	w := goneWriter{httptest.NewRecorder()}
	if err := writeProto(w, &pb.Node{Id: "n1"}); err != nil {
		t.Errorf("writeProto to a caller gone away: %v, want nil", err)
	}
	if err := writeProtoList(w, []*pb.Node{{Id: "n1"}}); err != nil {
		t.Errorf("writeProtoList to a caller gone away: %v, want nil", err)
	}
}
