package driverpb

// MaxMessageSize is the largest gRPC message berth sends or accepts on any
// hop a job travels: the HTTP API's request body, a raft command, server to
// server and server to client calls, and client to plugin calls (drivers
// and storage adapters, both ends set by this sdk). One number for every
// hop, so what one hop accepts the next can carry; gRPC's own default of
// 4 MiB would refuse at the driver a job every earlier hop took.
const MaxMessageSize = 64 << 20
