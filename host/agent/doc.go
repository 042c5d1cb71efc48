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
// a file is reported, not just the first, as ConfigErrors (file:line:col, field
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
// endpoint. A write made while another server leads goes from the agent to
// that leader directly (rpc_leader.go), one hop fewer than the local
// server's forward. Replies are rendered by rpc/apijson (status words, RFC 3339
// times, exact numbers, every field present). gRPC status codes map to HTTP
// statuses and errors are JSON objects {"code", "message"}. Every list is
// paginated by the server (?per_page=, ?next_token=, X-Berth-NextToken) and
// /v1/nodes filters on ?status= and answers list stubs with ?stub=true
// (http_nodes_stub.go). The node reads support blocking queries
// (?index=N&wait=10s) and return the index they reflect in X-Berth-Index;
// the server lists (members, peers, raft configuration) are read at request
// time and refuse ?index=. Reads are served from the receiving server's
// state unless ?consistent (or ?stale=false) asks for the leader.
//
// Jobs, allocations and evaluations (services Jobs, Allocs, Evals, NodeOps,
// System of rpc/pb): /v1/jobs (GET ?prefix=, PUT/POST register with a
// JobRegisterRequest body), /v1/jobs/parse (job source in, job JSON out,
// through host/jobspec), /v1/job/{id} (GET, DELETE ?purge=true) and its
// /summary, /allocations, /evaluations, /versions, /plan and /revert,
// /v1/allocations (?prefix, ?node_id, ?job_id), /v1/allocation/{id} with
// /stop (?no_replace) and /restart, /v1/evaluations (?job, ?status,
// ?prefix), /v1/evaluation/{id}, /v1/node/{id}/allocations, /drain and
// /eligibility, and /v1/system/gc. Writes accept PUT and POST; their
// bodies are the request messages in the API's JSON, decoded by
// rpc/apijson, so a misspelt field or a wrong type is 400 naming its JSON
// path; IDs come from the path (a body repeating one must agree). A write
// answers X-Berth-Index with the raft index it was applied at, so a
// blocking read with ?index= of one less sees it. Every list above is
// paged and, like the single reads, a blocking query.
//
// /v1/client/fs/logs/{alloc} (?task=, ?type=stdout|stderr, ?follow=true,
// ?origin=start|end, ?offset=) streams a task's log as plain bytes,
// flushed frame by frame, through ClientProxy.Logs on a server, which
// forwards it to the alloc's client; /restart goes the same way. The reply
// is committed only at the stream's first frame, so a refusal is still a
// JSON error; a stream that breaks later aborts the connection, so the
// caller sees a truncated body, and a caller that disconnects ends the
// stream to the client.
//
// /v1/metrics is Prometheus text (metrics.go): one process-wide registry
// holding go-metrics' sink (raft, fsm apply) and the collectors of the
// packages that time storage, scheduling and heartbeats (storageMetrics),
// served with gauges the leader reads from its state at each scrape
// (metrics_state.go: claims, attachments and allocs by state, nodes by
// status, plugin instances, the oldest claim's time in its state; a
// follower serves none of them, so sum() across servers counts the
// cluster once). Labels are bounded:
// enum words, methods, codes and CSI plugin IDs, never a volume, claim,
// alloc or node ID.
package agent
