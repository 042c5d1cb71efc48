// Package testutil holds helpers shared by berth's tests: a manual clock, a
// logger that writes to t.Log (shown only when a test fails), polling
// assertions, shared fixtures (HeavyNode) and CheckSentinelCodes, with which
// a package's test pins the gRPC code of each of its sentinels. Tests and the
// benchmark tool (internal/bench) use it; nothing in the berth binary imports
// it. (For ports, in-process agents and servers bind port 0 and advertise
// what they got; there is no "free port" helper, because a port found free
// can be taken before use.)
package testutil
