package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/errcode"
)

// EnvAddress and EnvToken name the environment variables the CLI reads.
const (
	EnvAddress = "BERTH_ADDR"
	EnvToken   = "BERTH_TOKEN"
)

// DefaultAddress is BERTH_ADDR, else the local agent's default HTTP address.
func DefaultAddress() string {
	if a := os.Getenv(EnvAddress); a != "" {
		return a
	}
	return "http://127.0.0.1:7646"
}

// Client talks to one agent's HTTP API.
type Client struct {
	base  *url.URL
	token string
	http  *http.Client
}

// NewClient returns a client for addr ("host:port" or an http(s) URL). The
// token, if BERTH_TOKEN is set, is sent with every request; an https://
// agent is reached with the TLS settings of BERTH_CACERT,
// BERTH_CLIENT_CERT and BERTH_CLIENT_KEY (see NewClientTLS).
func NewClient(addr string) (*Client, error) {
	return NewClientTLS(addr, TLSConfigFromEnv())
}

func newClient(addr string) (*Client, error) {
	if addr == "" {
		return nil, errors.New("api: empty address")
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		return nil, fmt.Errorf("api: address %q: %w", addr, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("api: address %q: scheme must be http or https", addr)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("api: address %q has no host", addr)
	}
	return &Client{base: u, token: os.Getenv(EnvToken), http: &http.Client{CheckRedirect: checkRedirect}}, nil
}

// Address returns the agent URL the client talks to.
func (c *Client) Address() string { return c.base.String() }

// Error is an error reply of the API.
type Error struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// Code is the machine-readable code ("not_found", "invalid_argument", ...).
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s (%s, HTTP %d)", e.Message, e.Code, e.StatusCode)
}

// GRPCCode returns the gRPC code Code names (Unknown for a name no code
// has), so errcode.Code and status.Code-style branching work on API errors
// as on server errors.
func (e *Error) GRPCCode() codes.Code {
	c, _ := errcode.FromName(e.Code)
	return c
}

// IsNotFound reports whether err is an API not_found error.
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.GRPCCode() == codes.NotFound
}

// QueryOptions control a read.
type QueryOptions struct {
	// WaitIndex makes the read block until the index passes it.
	WaitIndex uint64
	// WaitTime bounds the block.
	WaitTime time.Duration
	// Consistent sends the read to the leader.
	Consistent bool
	// PerPage bounds a list's page (0: the agent's default of 100; at most
	// 1000).
	PerPage int
	// NextToken starts a list at this key: the previous page's
	// QueryMeta.NextToken (or any prefix of a key).
	NextToken string
	// Params are further query parameters, such as a list's filters
	// ({"status": "ready"} for Nodes). The parameters the fields above
	// own (index, wait, consistent, stale, per_page, next_token) are
	// refused here with ErrReservedParam: a per_page or next_token in
	// Params would silently override the page AllPages asks for.
	Params map[string]string
}

// reservedParams are the query parameters QueryOptions has fields for
// (stale is the agent's inverse of consistent); Params may not set them.
var reservedParams = []string{"index", "wait", "consistent", "stale", "per_page", "next_token"}

// ErrReservedParam is returned by every read whose QueryOptions.Params sets
// a parameter a QueryOptions field owns; the request is not sent.
var ErrReservedParam = errcode.New(codes.InvalidArgument, "api: QueryOptions.Params sets a parameter that has a QueryOptions field")

// QueryMeta is what a read reflects.
type QueryMeta struct {
	LastIndex   uint64
	KnownLeader bool
	LastContact time.Duration
	// NextToken starts the next page of a list; "" on the last page.
	NextToken string
	// Endpoint is the read that answered ("GET /v1/nodes"), for messages.
	Endpoint string
}

func (q *QueryOptions) values() (url.Values, error) {
	v := url.Values{}
	if q == nil {
		return v, nil
	}
	for _, k := range reservedParams {
		if p, ok := q.Params[k]; ok {
			return nil, fmt.Errorf("%w: Params[%q] = %q; use the QueryOptions field instead", ErrReservedParam, k, p)
		}
	}
	if q.WaitIndex > 0 {
		v.Set("index", strconv.FormatUint(q.WaitIndex, 10))
	}
	if q.WaitTime > 0 {
		v.Set("wait", q.WaitTime.String())
	}
	if q.Consistent {
		v.Set("consistent", "true")
	}
	if q.PerPage > 0 {
		v.Set("per_page", strconv.Itoa(q.PerPage))
	}
	if q.NextToken != "" {
		v.Set("next_token", q.NextToken)
	}
	for k, p := range q.Params {
		v.Set(k, p)
	}
	return v, nil
}

// do sends a request and returns the response when it is a success; the
// caller closes the body.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body io.Reader) (*http.Response, error) {
	return c.doHeader(ctx, method, path, q, body, nil)
}

// doHeader is do with extra request headers (the CSI secrets of a request
// without a body).
func (c *Client) doHeader(ctx context.Context, method, path string, q url.Values, body io.Reader, hdr http.Header) (*http.Response, error) {
	u := *c.base
	// path is escaped (IDs in it went through url.PathEscape): keep it as
	// the raw path, or a job ID with a space or a slash would be escaped
	// twice.
	raw := strings.TrimSuffix(u.EscapedPath(), "/") + path
	p, err := url.PathUnescape(raw)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	u.Path, u.RawPath = p, raw
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, err
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	if c.token != "" {
		req.Header.Set(tokenHeader, c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	apiErr := &Error{StatusCode: resp.StatusCode}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err := json.Unmarshal(b, apiErr); err != nil || apiErr.Code == "" {
		apiErr.Code = errcode.Name(codes.Unknown)
		apiErr.Message = strings.TrimSpace(string(b))
	}
	return nil, apiErr
}

// getJSON decodes a JSON body into out (any JSON value, or a proto message).
func (c *Client) getJSON(ctx context.Context, path string, q *QueryOptions, out any) (*QueryMeta, error) {
	v, err := q.values()
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	resp, err := c.do(ctx, http.MethodGet, path, v, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if err := decode(resp.Body, out); err != nil {
		return nil, fmt.Errorf("GET %s: decoding response: %w", path, err)
	}
	return parseMeta(resp.Header, "GET "+path), nil
}

func decode(r io.Reader, out any) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if m, ok := out.(proto.Message); ok {
		return apijson.Unmarshal(b, m)
	}
	return json.Unmarshal(b, out)
}

// write sends in (a message, or nothing when nil) as the JSON body of a
// PUT, POST or DELETE and decodes the reply into out.
func (c *Client) write(ctx context.Context, method, path string, q url.Values, in, out proto.Message) error {
	var body io.Reader
	if in != nil {
		// Compact: a job within server.job_max_size must fit the agent's
		// body limit, which the indented rendering with every field can
		// be ten times over.
		b, err := apijson.MarshalCompact(in)
		if err != nil {
			return fmt.Errorf("%s %s: encoding request: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	resp, err := c.do(ctx, method, path, q, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := decode(resp.Body, out); err != nil {
		return fmt.Errorf("%s %s: decoding response: %w", method, path, err)
	}
	return nil
}

// getList decodes a JSON array of messages made by newMsg.
func getList[M proto.Message](ctx context.Context, c *Client, path string, q *QueryOptions, newMsg func() M) ([]M, *QueryMeta, error) {
	v, err := q.values()
	if err != nil {
		return nil, nil, fmt.Errorf("GET %s: %w", path, err)
	}
	resp, err := c.do(ctx, http.MethodGet, path, v, nil)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("GET %s: reading response: %w", path, err)
	}
	out, err := apijson.UnmarshalList(b, newMsg)
	if err != nil {
		return nil, nil, fmt.Errorf("GET %s: decoding response: %w", path, err)
	}
	return out, parseMeta(resp.Header, "GET "+path), nil
}

func parseMeta(h http.Header, endpoint string) *QueryMeta {
	m := &QueryMeta{Endpoint: endpoint}
	m.LastIndex, _ = strconv.ParseUint(h.Get("X-Berth-Index"), 10, 64)
	m.KnownLeader, _ = strconv.ParseBool(h.Get("X-Berth-KnownLeader"))
	if ms, err := strconv.ParseInt(h.Get("X-Berth-LastContact"), 10, 64); err == nil {
		m.LastContact = time.Duration(ms) * time.Millisecond
	}
	m.NextToken = h.Get("X-Berth-NextToken")
	return m
}
