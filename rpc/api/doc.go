// Package api is the Go client of berth's HTTP JSON API, used by the CLI and
// by anyone scripting berth from Go. Responses are the protobuf messages of
// rpc/pb, decoded with rpc/apijson (the codec the agent encodes with), so the
// client and the agent share one definition of every object.
//
//	c, err := api.NewClient(api.DefaultAddress())
//	page, meta, err := c.Nodes(ctx, &api.QueryOptions{PerPage: 500})
//	all, _, err := api.AllPages(ctx, &api.QueryOptions{Params: map[string]string{"status": "ready"}}, c.Nodes)
//
// Every list is paginated: a list method returns one page and
// QueryMeta.NextToken, which the next call passes as QueryOptions.NextToken.
// Pages iterates over the pages (a caller may stop early) and AllPages
// collects them all; both refuse, with ErrPageToken, a next_token that is
// not strictly after the token its request sent, since keys are in byte
// order and a token that does not advance would be followed forever.
// QueryOptions.Params carries a list's filters and may not set the
// parameters QueryOptions has fields for (ErrReservedParam).
//
// The job endpoints are grouped as Nomad's client groups them:
// c.Jobs() (Register, List, Info, Summary, Deregister, Versions, Revert,
// Plan, Allocations, Evaluations), c.Allocations() (List, Info, Stop,
// Restart, Logs — an io.ReadCloser stream), c.Evaluations() (List, Info),
// c.NodeOps() (Drain, Eligibility, Allocations; the node reads stay
// c.Nodes and c.Node) and c.System() (GC). IDs are escaped once into the
// path, so a job ID may hold any character.
//
// Errors returned by the agent are *Error values carrying the HTTP status and
// the error code ("not_found", "unavailable", ...), the name rpc/errcode gives
// the server's gRPC code; branch on Code (or errcode.Code(err), which reads it
// back as the gRPC code), never on the message.
//
// NewInProcessClient is a client served by an http.Handler in the same
// process (the agent's web UI reads its own API through it, with the
// token of the page's request).
package api
