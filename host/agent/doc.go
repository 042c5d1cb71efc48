// Package agent is a running berth agent: it reads the agent configuration,
// starts the server and client roles it enables, and serves the HTTP JSON API
// (/v1/...) on every agent.
//
// # Configuration
//
// `berth run -config FILE` reads HCL (or HCL's JSON syntax for .json files);
// the flag repeats, and a directory stands for its *.hcl and *.json files in
// lexical order. Files merge in order: a later file overrides the fields it
// sets, lists replace, plugin blocks merge by name. Unknown keys, wrong types
// and invalid values are errors naming the file, line and key; every error in
// a file is reported, not just the first, as ConfigErrors (file:line, field
// path and a sentinel kind such as ErrUnknownKey). ParseConfig returns only
// what one file sets; LoadConfigFiles is the defaults plus the files in order.
// Merge overrides with the keys a file contains (so a file can set something
// back to false or 0) or with the non-zero fields of a Config built in Go.
// HCL 1's one-line block style (ports { http = 1  rpc = 2 }) is accepted.
// Plugin config bodies are free-form values checked by the plugin's schema;
// PluginConfig.Source says where each came from. DevConfig is what
// `berth run -dev` uses: both roles on 127.0.0.1, a temporary data dir
// removed at exit.
//
// # HTTP API
//
// Handlers call the internal gRPC services (rpc/pb) on the local server, or,
// on a client-only agent, on its servers, so every agent answers every
// endpoint. gRPC status codes map to HTTP statuses and errors are JSON
// objects {"code", "message"}. List endpoints support blocking queries
// (?index=N&wait=10s) and return the index they reflect in X-Berth-Index;
// reads are served from the receiving server's state unless ?consistent (or
// ?stale=false) asks for the leader.
package agent
