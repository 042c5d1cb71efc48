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
// QueryMeta.NextToken, which the next call passes as QueryOptions.NextToken;
// AllPages follows them to the end.
//
// Errors returned by the agent are *Error values carrying the HTTP status and
// the error code ("not_found", "unavailable", ...), the name rpc/errcode gives
// the server's gRPC code; branch on Code (or errcode.Code(err), which reads it
// back as the gRPC code), never on the message.
package api
