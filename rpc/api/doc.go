// Package api is the Go client of berth's HTTP JSON API, used by the CLI and
// by anyone scripting berth from Go. Responses are the protobuf messages of
// rpc/pb, decoded from protojson, so the client and the agent share one
// definition of every object.
//
//	c, err := api.NewClient(api.DefaultAddress())
//	nodes, meta, err := c.Nodes(ctx, &api.QueryOptions{WaitIndex: 0})
//
// Errors returned by the agent are *Error values carrying the HTTP status and
// the error code ("not_found", "unavailable", ...), the name rpc/errcode gives
// the server's gRPC code; branch on Code (or errcode.Code(err), which reads it
// back as the gRPC code), never on the message.
package api
