package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/host/server"
	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// Response headers of read endpoints.
const (
	HeaderIndex       = "X-Berth-Index"
	HeaderKnownLeader = "X-Berth-KnownLeader"
	HeaderLastContact = "X-Berth-LastContact"
	// HeaderNextToken carries the next_token of a list's next page; it is
	// absent on the last page.
	HeaderNextToken = "X-Berth-NextToken"
)

// handlerFunc is an API handler; a returned error becomes a JSON error reply.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

func (a *Agent) routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(path string, byMethod map[string]handlerFunc) {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			h, ok := byMethod[r.Method]
			if !ok {
				writeError(w, &apiError{status: http.StatusMethodNotAllowed, code: "method_not_allowed",
					msg: fmt.Sprintf("%s does not support %s", r.URL.Path, r.Method)})
				return
			}
			if err := h(w, r); err != nil {
				writeError(w, err)
			}
		})
	}
	handle("/v1/status/leader", map[string]handlerFunc{"GET": a.statusLeader})
	handle("/v1/status/peers", map[string]handlerFunc{"GET": a.statusPeers})
	handle("/v1/agent/self", map[string]handlerFunc{"GET": a.agentSelf})
	handle("/v1/agent/members", map[string]handlerFunc{"GET": a.agentMembers})
	handle("/v1/nodes", map[string]handlerFunc{"GET": a.nodeList})
	handle("/v1/node/{id}", map[string]handlerFunc{"GET": a.nodeGet})
	handle("/v1/operator/raft/configuration", map[string]handlerFunc{"GET": a.raftConfiguration})
	handle("/v1/operator/raft/peer", map[string]handlerFunc{"DELETE": a.raftRemovePeer})
	handle("/v1/operator/snapshot", map[string]handlerFunc{"GET": a.snapshotSave, "PUT": a.snapshotRestore})
	handle("/v1/metrics", map[string]handlerFunc{"GET": a.metrics})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, status.Errorf(codes.NotFound, "no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	return mux
}

// apiError is an error with its HTTP status and machine-readable code, for
// the answers no gRPC code describes (405 Method Not Allowed); every other
// error is answered from its gRPC code.
type apiError struct {
	status int
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// writeError answers with {"code", "message"}: the HTTP status and code of
// the error's gRPC code (rpc/errcode's one table), whether it came back from
// a server or is a sentinel of the agent's own.
func writeError(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		st := status.Convert(errcode.Status(err))
		ae = &apiError{status: errcode.HTTPStatus(st.Code()), code: errcode.Name(st.Code()), msg: st.Message()}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(ae.status)
	_ = json.NewEncoder(w).Encode(map[string]string{"code": ae.code, "message": ae.msg})
}

// writeJSON writes a plain Go value (a string, a list of strings).
func writeJSON(w http.ResponseWriter, v any) error {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeProto writes a message in the API's JSON (rpc/apijson).
func writeProto(w http.ResponseWriter, m proto.Message) error {
	b, err := apijson.Marshal(m)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	_, err = w.Write(append(b, '\n'))
	return err
}

// writeProtoList writes messages as one JSON array.
func writeProtoList[M proto.Message](w http.ResponseWriter, ms []M) error {
	b, err := apijson.MarshalList(ms)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	_, err = w.Write(append(b, '\n'))
	return err
}

// parseQuery reads ?index=, ?wait=, ?consistent, ?stale=, ?per_page= and
// ?next_token= into QueryOptions.
func parseQuery(r *http.Request) (*pb.QueryOptions, error) {
	q := &pb.QueryOptions{}
	v := r.URL.Query()
	if s := v.Get("index"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return nil, badRequest("query parameter index=%q: not a non-negative integer", s)
		}
		q.MinIndex = n
	}
	if s := v.Get("wait"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return nil, badRequest("query parameter wait=%q: not a duration like 10s", s)
		}
		// Round up: a sub-millisecond wait is a short wait, not "no wait
		// given" (which means the default of minutes).
		q.MaxWaitMs = (d + time.Millisecond - 1).Milliseconds()
	}
	if v.Has("consistent") {
		if s := v.Get("consistent"); s != "" && s != "true" && s != "1" {
			return nil, badRequest("query parameter consistent=%q: use ?consistent or ?consistent=true", s)
		}
		q.Consistent = true
	}
	if s := v.Get("stale"); s != "" {
		stale, err := strconv.ParseBool(s)
		if err != nil {
			return nil, badRequest("query parameter stale=%q: not a boolean", s)
		}
		q.Consistent = q.Consistent || !stale
	}
	if s := v.Get("per_page"); s != "" {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil || n == 0 || n > server.MaxPerPage {
			return nil, badRequest("query parameter per_page=%q: must be an integer from 1 to %d (default %d)", s, server.MaxPerPage, server.DefaultPerPage)
		}
		q.PerPage = uint32(n)
	}
	q.NextToken = v.Get("next_token")
	return q, nil
}

func setQueryHeaders(w http.ResponseWriter, m *pb.QueryMeta) {
	w.Header().Set(HeaderIndex, strconv.FormatUint(m.GetIndex(), 10))
	w.Header().Set(HeaderKnownLeader, strconv.FormatBool(m.GetKnownLeader()))
	w.Header().Set(HeaderLastContact, strconv.FormatInt(m.GetLastContactMs(), 10))
	if t := m.GetNextToken(); t != "" {
		w.Header().Set(HeaderNextToken, t)
	}
}

// rpcCall runs fn on a connection to this agent's server or, on a client-only
// agent, to each of its servers in turn until one is reachable.
func (a *Agent) rpcCall(ctx context.Context, fn func(context.Context, *grpc.ClientConn) error) error {
	if len(a.rpcAddrs) == 0 {
		return status.Error(codes.Unavailable, "agent has no server to ask")
	}
	var err error
	for _, addr := range a.rpcAddrs {
		conn, cerr := a.pool.Conn(addr)
		if cerr != nil {
			err = cerr
			continue
		}
		err = fn(ctx, conn)
		if status.Code(err) != codes.Unavailable {
			return err
		}
	}
	return err
}
