package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"berth.dev/berth/host/jobspec"
	"berth.dev/berth/host/server/endpoints"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/apijson"
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
	return guardHTTP(a.apiRouter().mux, a.httpLis != nil && loopbackListener(a.httpLis.Addr()))
}

// apiRouter builds the API's routes; the hostile-input test walks them.
func (a *Agent) apiRouter() *router {
	rt := newRouter(a.logger)
	rt.maxBody = a.maxBodyBytes()
	rt.inFlight = semaphore.NewWeighted(bodiesInFlight * rt.maxBody)
	mux, handle := rt.mux, rt.handle
	handle("/v1/status/leader", map[string]handlerFunc{"GET": a.statusLeader})
	handle("/v1/status/peers", map[string]handlerFunc{"GET": a.statusPeers})
	handle("/v1/agent/self", map[string]handlerFunc{"GET": a.agentSelf})
	handle("/v1/agent/members", map[string]handlerFunc{"GET": a.agentMembers})
	handle("/v1/nodes", map[string]handlerFunc{"GET": a.nodeList})
	handle("/v1/node/{id}", map[string]handlerFunc{"GET": a.nodeGet})
	handle("/v1/node/{id}/allocations", map[string]handlerFunc{"GET": a.nodeAllocations})
	handle("/v1/node/{id}/drain", writeMethods(a.nodeDrain))
	handle("/v1/node/{id}/eligibility", writeMethods(a.nodeEligibility))
	handle("/v1/node/{id}/fence", writeMethods(a.nodeFence))
	handle("/v1/jobs", map[string]handlerFunc{"GET": a.jobList, "PUT": a.jobRegister, "POST": a.jobRegister})
	handle("/v1/jobs/parse", writeMethods(a.jobParse))
	handle("/v1/job/{id}", map[string]handlerFunc{"GET": a.jobGet, "DELETE": a.jobDeregister})
	handle("/v1/job/{id}/summary", map[string]handlerFunc{"GET": a.jobSummary})
	handle("/v1/job/{id}/allocations", map[string]handlerFunc{"GET": a.jobAllocations})
	handle("/v1/job/{id}/evaluations", map[string]handlerFunc{"GET": a.jobEvaluations})
	handle("/v1/job/{id}/versions", map[string]handlerFunc{"GET": a.jobVersions})
	handle("/v1/job/{id}/plan", writeMethods(a.jobPlan))
	handle("/v1/job/{id}/revert", writeMethods(a.jobRevert))
	handle("/v1/allocations", map[string]handlerFunc{"GET": a.allocList})
	handle("/v1/allocation/{id}", map[string]handlerFunc{"GET": a.allocGet})
	handle("/v1/allocation/{id}/stop", writeMethods(a.allocStop))
	handle("/v1/allocation/{id}/restart", writeMethods(a.allocRestart))
	handle("/v1/evaluations", map[string]handlerFunc{"GET": a.evalList})
	handle("/v1/evaluation/{id}", map[string]handlerFunc{"GET": a.evalGet})
	handle("/v1/client/fs/logs/{alloc}", map[string]handlerFunc{"GET": a.allocLogs})
	handle("/v1/plugins", map[string]handlerFunc{"GET": a.pluginList})
	handle("/v1/plugin/csi/{id}", map[string]handlerFunc{"GET": a.pluginGet})
	handle("/v1/plugin/{id}", map[string]handlerFunc{"GET": a.pluginGet})
	handle("/v1/volumes", map[string]handlerFunc{"GET": a.volumeList})
	handle("/v1/volumes/claims", map[string]handlerFunc{"GET": a.claimList})
	handle("/v1/volumes/snapshot", map[string]handlerFunc{"GET": a.snapshotList, "PUT": a.snapshotCreate, "POST": a.snapshotCreate, "DELETE": a.snapshotDelete})
	handle("/v1/volume/csi/{id}", map[string]handlerFunc{"GET": a.volumeGet, "PUT": a.volumeRegister, "POST": a.volumeRegister, "DELETE": a.volumeDeregister})
	handle("/v1/volume/csi/{id}/create", writeMethods(a.volumeCreate))
	handle("/v1/volume/csi/{id}/delete", map[string]handlerFunc{"DELETE": a.volumeDelete, "PUT": a.volumeDelete, "POST": a.volumeDelete})
	handle("/v1/volume/csi/{id}/claims", map[string]handlerFunc{"GET": a.volumeClaims, "PUT": a.volumeClaimCreate, "POST": a.volumeClaimCreate})
	handle("/v1/volume/csi/{id}/expand", writeMethods(a.volumeExpand))
	handle("/v1/volume/csi/{id}/detach", map[string]handlerFunc{"DELETE": a.volumeDetach})
	handle("/v1/volume/csi/{id}/claims/{claim}", map[string]handlerFunc{"GET": a.volumeClaimGet, "DELETE": a.volumeClaimRelease})
	handle("/v1/volume/claim/{claim}", map[string]handlerFunc{"GET": a.claimByID})
	handle("/v1/system/gc", writeMethods(a.systemGC))
	handle("/v1/operator/raft/configuration", map[string]handlerFunc{"GET": a.raftConfiguration})
	handle("/v1/operator/raft/peer", map[string]handlerFunc{"DELETE": a.raftRemovePeer})
	handle("/v1/operator/snapshot", map[string]handlerFunc{"GET": a.snapshotSave, "PUT": a.snapshotRestore})
	handle("/v1/metrics", map[string]handlerFunc{"GET": a.metrics})
	a.handleACL(handle)
	handle("/v1/node/{id}/readmit", writeMethods(a.nodeReadmit))
	rt.bodyUse(bodyStreamed, "/v1/operator/snapshot", "PUT")
	rt.bodyUse(bodyNone, "/v1/job/{id}", "DELETE")
	rt.bodyUse(bodyNone, "/v1/allocation/{id}/stop", "PUT", "POST")
	rt.bodyUse(bodyNone, "/v1/volumes/snapshot", "DELETE")
	rt.bodyUse(bodyNone, "/v1/volume/csi/{id}", "DELETE")
	rt.bodyUse(bodyNone, "/v1/volume/csi/{id}/claims/{claim}", "DELETE")
	rt.bodyUse(bodyNone, "/v1/system/gc", "PUT", "POST")
	rt.bodyUse(bodyNone, "/v1/operator/raft/peer", "DELETE")
	rt.bodyUse(bodyNone, "/v1/volume/csi/{id}/detach", "DELETE")
	handle("/v1/volumes/host", map[string]handlerFunc{"GET": a.hostVolumeList, "PUT": a.hostVolumeCreate, "POST": a.hostVolumeCreate})
	handle("/v1/volume/host/{id}", map[string]handlerFunc{"GET": a.hostVolumeGet, "DELETE": a.hostVolumeDelete})
	rt.bodyUse(bodyNone, "/v1/volume/host/{id}", "DELETE")
	rt.bodyUse(bodyNone, "/v1/acl/bootstrap", "PUT", "POST")
	rt.bodyUse(bodyNone, "/v1/acl/policy/{name}", "DELETE")
	rt.bodyUse(bodyNone, "/v1/acl/token/{accessor}", "DELETE")
	rt.authorize = a.authorizeHTTP
	a.handleUI(handle, mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, status.Errorf(codes.NotFound, "no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	return rt
}

// router routes by path, then by method. A path may be given in several
// handle calls, each with its own methods (the volume claim reads and
// writes live in two files): the methods are merged into one route. One
// method twice for a path is a bug and panics at startup.
// Every path parameter and query parameter is checked (checkRequestText)
// before a handler runs, and every 5xx answered is logged.
type router struct {
	mux    *http.ServeMux
	routes map[string]map[string]handlerFunc
	logger hclog.Logger
	// maxBody bounds every body read with readBody (maxBodyBytes when
	// zero), and the body of a route that takes none; a streamed body (a
	// snapshot restore) is not read with it.
	maxBody int64
	// bodies says, by "METHOD path", how a route's handler uses a request
	// body; the default is bodyRead, and bodyNone for GET and HEAD.
	bodies map[string]bodyUse
	// inFlight holds the body bytes being read or parsed at once: each
	// body read whole takes its Content-Length (maxBody when not given)
	// until its handler returns. A body waits for room at most bodyWait,
	// then is answered 503.
	inFlight *semaphore.Weighted
	bodyWait time.Duration
	// bodyReadTimeout bounds reading one body, so a caller trickling it
	// cannot hold its share of inFlight (and a connection) forever.
	bodyReadTimeout time.Duration
	// authorize, when set, decides a request by its route before its body
	// is read (http_acl.go), and returns it carrying its token on.
	authorize func(r *http.Request, path string) (*http.Request, error)
}

// bodyUse is how a route's handler uses a request body (a GET's, none).
type bodyUse int

const (
	// bodyRead: read whole by the handler (readBody), up to maxBody.
	bodyRead bodyUse = iota
	// bodyNone: no body is read; one over maxBody is still refused, as on
	// every other route, and a smaller one discarded.
	bodyNone
	// bodyStreamed: streamed on by the handler (a snapshot restore), with
	// checks of its own.
	bodyStreamed
)

// Defaults of the router's body admission.
const (
	// bodiesInFlight is how many bodies of the largest size may be held at
	// once (each costs several times its size while parsed).
	bodiesInFlight = 4
	// defaultBodyWait is how long a body waits for room among those in
	// flight before it is answered 503.
	defaultBodyWait = 30 * time.Second
	// defaultBodyReadTimeout bounds reading one body: the largest at
	// 1 Mbit/s.
	defaultBodyReadTimeout = 2 * time.Minute
)

func newRouter(logger hclog.Logger) *router {
	return &router{mux: http.NewServeMux(), routes: map[string]map[string]handlerFunc{}, logger: logger,
		bodies: map[string]bodyUse{}, bodyWait: defaultBodyWait, bodyReadTimeout: defaultBodyReadTimeout}
}

// bodyUse declares how the handlers of path for methods use a body.
func (rt *router) bodyUse(use bodyUse, path string, methods ...string) {
	for _, m := range methods {
		if _, ok := rt.routes[path][m]; !ok {
			panic(fmt.Sprintf("agent routes: body use of %s %s, which is not routed", m, path))
		}
		rt.bodies[m+" "+path] = use
	}
}

// bodyLimit is the router's body limit.
func (rt *router) bodyLimit() int64 {
	if rt.maxBody > 0 {
		return rt.maxBody
	}
	return maxBodyBytes
}

// bodyUseOf is how the handler of r's route uses its body.
func (rt *router) bodyUseOf(r *http.Request, path string) bodyUse {
	if use, declared := rt.bodies[r.Method+" "+path]; declared {
		return use
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return bodyNone // a read never reads a body
	}
	return bodyRead
}

// admitBody readies r's body for its handler as its route uses it (see
// bodyUse). It returns the release of the body's share of the bytes in
// flight, to call when the handler has returned.
func (rt *router) admitBody(w http.ResponseWriter, r *http.Request, path string) (release func(), err error) {
	noop := func() {}
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return noop, nil
	}
	use := rt.bodyUseOf(r, path)
	if use == bodyStreamed {
		return noop, nil
	}
	limit := rt.bodyLimit()
	if r.ContentLength > limit {
		return noop, badRequest("request body: larger than %d bytes", limit)
	}
	switch use {
	case bodyNone:
		// Read and dropped as it comes: it costs no memory.
		// The read deadline is cleared only after a whole body (see
		// readBody).
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Now().Add(rt.bodyReadTimeout))
		if _, err := io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, limit)); err != nil {
			return noop, bodyError(err)
		}
		_ = rc.SetReadDeadline(time.Time{})
		return noop, nil
	}
	if rt.inFlight == nil {
		return noop, nil
	}
	n := r.ContentLength
	if n < 0 {
		n = limit // chunked: it may be as large as the limit
	}
	ctx, cancel := context.WithTimeout(r.Context(), rt.bodyWait)
	defer cancel()
	if err := rt.inFlight.Acquire(ctx, n); err != nil {
		if r.Context().Err() != nil {
			return noop, r.Context().Err() // the caller went away
		}
		w.Header().Set("Retry-After", "1")
		return noop, &apiError{status: http.StatusServiceUnavailable, code: "unavailable",
			msg: fmt.Sprintf("request body: the agent is reading or parsing %d bytes of request bodies, its most at once, and had no room for this one's %d within %s: try again", bodiesInFlight*limit, n, rt.bodyWait)}
	}
	return func() { rt.inFlight.Release(n) }, nil
}

func (rt *router) handle(path string, byMethod map[string]handlerFunc) {
	methods, seen := rt.routes[path]
	if !seen {
		methods = map[string]handlerFunc{}
		rt.routes[path] = methods
		rt.mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			h, ok := methods[r.Method]
			if !ok {
				writeError(w, &apiError{status: http.StatusMethodNotAllowed, code: "method_not_allowed",
					msg: fmt.Sprintf("%s does not support %s", r.URL.Path, r.Method)})
				return
			}
			if rt.maxBody > 0 {
				r = r.WithContext(context.WithValue(r.Context(), bodyLimitKey{}, rt.maxBody))
			}
			if rt.bodyReadTimeout > 0 {
				r = r.WithContext(context.WithValue(r.Context(), bodyReadTimeoutKey{}, rt.bodyReadTimeout))
			}
			err := checkRequestText(r)
			if err == nil {
				err = checkContentType(r, rt.bodyUseOf(r, path))
			}
			if err == nil && rt.authorize != nil {
				r, err = rt.authorize(r, path)
			}
			if err == nil {
				var release func()
				if release, err = rt.admitBody(w, r, path); err == nil {
					err = serveAdmitted(w, r, h, release)
				}
			}
			if err != nil {
				rt.logServerError(r, err)
				writeError(w, err)
			}
		})
	}
	for m, h := range byMethod {
		if _, dup := methods[m]; dup {
			panic(fmt.Sprintf("agent routes: %s %s registered twice", m, path))
		}
		methods[m] = h
	}
}

// serveAdmitted runs h and then gives back its body's admission, also
// when h panics (net/http recovers a handler's panic per connection): a
// permit kept would shrink the room of every later body for good.
func serveAdmitted(w http.ResponseWriter, r *http.Request, h handlerFunc, release func()) error {
	defer release()
	return h(w, r)
}

// writeMethods answers PUT and POST alike, as Nomad's API does for its
// writes.
func writeMethods(h handlerFunc) map[string]handlerFunc {
	return map[string]handlerFunc{"PUT": h, "POST": h}
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
	ae := apiErrorOf(err)
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
	writeBody(w, b)
	return nil
}

// writeBody writes an answer's JSON. Once the headers are sent an error
// can no longer be answered: a failed write is a client gone away, not a
// server error, so it is not returned.
func writeBody(w http.ResponseWriter, b []byte) {
	_, _ = w.Write(append(b, '\n'))
}

// writeProtoList writes messages as one JSON array.
func writeProtoList[M proto.Message](w http.ResponseWriter, ms []M) error {
	b, err := apijson.MarshalList(ms)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	writeBody(w, b)
	return nil
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
		if err != nil || n == 0 || n > endpoints.MaxPerPage {
			return nil, badRequest("query parameter per_page=%q: must be an integer from 1 to %d (default %d)", s, endpoints.MaxPerPage, endpoints.DefaultPerPage)
		}
		q.PerPage = uint32(n)
	}
	q.NextToken = v.Get("next_token")
	return q, nil
}

// setWriteHeaders reports the raft index a write was applied at, so a
// caller can pass it as ?index= to a blocking read that must see the write.
func setWriteHeaders(w http.ResponseWriter, m *pb.WriteMeta) {
	w.Header().Set(HeaderIndex, strconv.FormatUint(m.GetIndex(), 10))
}

// maxBodyBytes bounds a request body read without the router's limit (a
// handler called directly): nothing larger could be sent on to a server in
// one gRPC message. The router holds bodies to Agent.maxBodyBytes.
const maxBodyBytes = rpc.MaxMessageSize

// registerBound bounds a JobRegisterRequest's compact JSON (what the Go
// API client sends) by its encoded size: factor bytes per encoded byte,
// plus slack (apijson.MaxExpansion). Computed on first use: walking the
// descriptors builds rpc/pb's full descriptors, which every other berth
// command (the binary is one) would pay for at start-up.
var registerBound = sync.OnceValues(func() (factor, slack int) {
	return apijson.MaxExpansion((&pb.JobRegisterRequest{}).ProtoReflect().Descriptor())
})

// maxBodyBytes is the largest request body the API reads: room for the
// largest job server.job_max_size lets through (a bound on its encoded
// size) in the compact JSON the Go API client sends, whatever its shape
// (apijson.MaxExpansion: 12 bytes per encoded byte), plus 1 MiB for the
// request around it; 13 MiB by default. A body is read whole and then
// parsed, costing several times its size, so the body limit is no larger
// than that, and bodies in flight together are bounded (bodyBudget).
func (a *Agent) maxBodyBytes() int64 {
	var limits jobspec.Limits
	if a.cfg != nil {
		limits = a.cfg.Server.JobLimits
	}
	registerExpansion, registerSlack := registerBound()
	return int64(registerExpansion)*int64(limits.WithDefaults().MaxBytes) + int64(registerSlack) + 1<<20
}

// bodyLimitKey carries the router's body limit in a request's context.
type bodyLimitKey struct{}

// readBody reads a request body whole, up to the router's limit.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	limit, ok := r.Context().Value(bodyLimitKey{}).(int64)
	if !ok {
		limit = maxBodyBytes
	}
	// A read deadline for the body alone, cleared once it is read: the
	// server's own would also cut a long answer (a blocking query, a
	// followed log).
	// A failed read keeps it: the server, discarding what is left of the
	// body before it answers, must not wait for a caller that stalled.
	rc := http.NewResponseController(w)
	t, timed := r.Context().Value(bodyReadTimeoutKey{}).(time.Duration)
	if timed {
		_ = rc.SetReadDeadline(time.Now().Add(t))
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		return nil, bodyError(err)
	}
	if timed {
		_ = rc.SetReadDeadline(time.Time{})
	}
	return b, nil
}

// bodyError is the answer to a failed read of a request body.
func bodyError(err error) error {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return badRequest("request body: larger than %d bytes", tooBig.Limit)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return badRequest("reading request body: not received in time")
	}
	return badRequest("reading request body: %v", err)
}

// bodyReadTimeoutKey carries the router's body read timeout in a request's
// context.
type bodyReadTimeoutKey struct{}

// decodeBody reads the request body into m with rpc/apijson, which refuses
// unknown fields, wrong types and unknown words naming the field's JSON path.
// An empty body leaves m as it is when optional, else it is refused.
func decodeBody(w http.ResponseWriter, r *http.Request, m proto.Message, optional bool) error {
	b, err := readBody(w, r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(b)) == 0 {
		if optional {
			return nil
		}
		return badRequest("request body: empty; want a JSON object")
	}
	if err := apijson.Unmarshal(b, m); err != nil {
		return badRequest("request body: %v", err)
	}
	return nil
}

// samePathID checks that an ID repeated in a request body agrees with the
// one in the path; the path's is the one used.
func samePathID(field, inBody, inPath string) error {
	if inBody != "" && inBody != inPath {
		return badRequest("request body: %s %q differs from %q in the path", field, inBody, inPath)
	}
	return nil
}

// queryBool reads an optional boolean query parameter (absent: false; a
// bare ?name: true).
func queryBool(r *http.Request, name string) (bool, error) {
	v := r.URL.Query()
	if !v.Has(name) {
		return false, nil
	}
	s := v.Get(name)
	if s == "" {
		return true, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, badRequest("query parameter %s=%q: not a boolean", name, s)
	}
	return b, nil
}

// queryEnum reads an optional query parameter spelled as one of an enum's
// API words ("ready", "complete"); absent is 0.
func queryEnum(r *http.Request, name string, ed protoreflect.EnumDescriptor) (protoreflect.EnumNumber, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return 0, nil
	}
	n, ok := apijson.EnumNumber(ed, s)
	if !ok || n == 0 {
		return 0, badRequest("query parameter %s=%q: must be one of %s", name, s, strings.Join(apijson.EnumWords(ed, false), ", "))
	}
	return n, nil
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
