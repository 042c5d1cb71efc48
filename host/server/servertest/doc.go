// Package servertest puts many objects into a running server's state through its
// raft, for tests that need a large cluster's worth of state (10,000 nodes
// listed page by page). It is imported only by tests (the agent's and the
// CLI's paging tests), as net/http/httptest is.
package servertest
