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
// # Task drivers
//
// The client role runs its task drivers through a taskdrivers.Manager: the
// built-in raw_exec (and mock, in dev mode or when a plugin block names it)
// and every executable in plugin_dir (default <data_dir>/plugins), each a
// go-plugin subprocess configured from its plugin block. The client state
// DB (<data_dir>/client/state.db) keeps the plugins' reattach configs and
// the tasks' handles. An invalid plugin config stops the agent from
// starting; a missing or crashing plugin only makes its driver unhealthy.
//
// What survives an agent stop: a graceful stop (SIGINT, SIGTERM) stops the
// driver plugin processes but not the tasks, which run under their own
// executors (raw_exec) in sessions of their own; the next start launches
// new plugins and recovers the tasks from their persisted handles. An agent
// that dies leaves its plugins running too, and the next start reattaches
// to them. A dev agent deletes its data dir at exit, so it stops its tasks
// first. (Run the agent so that its service manager does not kill the
// whole process tree on stop, e.g. systemd KillMode=process, or tasks die
// with it.)
//
// # HTTP API
//
// Handlers call the internal gRPC services (rpc/pb) on the local server, or,
// on a client-only agent, on its servers, so every agent answers every
// endpoint. Replies are rendered by rpc/apijson (status words, RFC 3339
// times, exact numbers, every field present). gRPC status codes map to HTTP
// statuses and errors are JSON objects {"code", "message"}. Every list is
// paginated by the server (?per_page=, ?next_token=, X-Berth-NextToken) and
// /v1/nodes filters on ?status=. The node reads support blocking queries
// (?index=N&wait=10s) and return the index they reflect in X-Berth-Index;
// the server lists (members, peers, raft configuration) are read at request
// time and refuse ?index=. Reads are served from the receiving server's
// state unless ?consistent (or ?stale=false) asks for the leader.
package agent
