// Package rpc is berth's wire layer. The protocol lives in rpc/proto as
// protobuf (generated Go in rpc/pb); every cluster object and raft command is
// defined there once and used directly by the state machine, the internal
// gRPC services and the HTTP API (as JSON through rpc/apijson).
//
// This package holds the gRPC plumbing shared by servers and clients: a
// connection pool keyed by address and the metadata keys of the forwarding
// protocol. Errors cross the wire as gRPC status codes, never as strings to
// be parsed; rpc/errcode gives every sentinel its code and maps codes to the
// HTTP API's statuses. The Go HTTP API client used by the CLI is in rpc/api.
package rpc
