// Package pb holds berth's types: the Go code generated from the protobuf
// messages under rpc/proto/berth/v1 (nodes, jobs, allocations, evaluations,
// volumes, claims, attachments, plugins, the raft commands and snapshot
// records, and the internal gRPC services), used as they are by the state
// machine, the servers, the clients and the HTTP API — there are no mirror
// structs. The generated files are committed; `make proto` regenerates
// them and `make check` fails when they are stale.
//
// One hand-written file sits beside them: words.go, the one spelling of an
// enum value (EnumWord: "single-node-writer", "ready"), which the JSON
// codec, the CLI and every message that names a state use.
package pb
