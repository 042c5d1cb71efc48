// Package testutil holds helpers shared by berth's tests: a manual clock, a
// logger that writes to t.Log (shown only when a test fails), polling
// assertions, shared fixtures (HeavyNode), CheckSentinelCodes (with which a
// package's test pins the gRPC code of each of its sentinels) and the rule for
// tests the machine cannot run: RequireRoot and Unavailable skip with a
// message, but fail under CI=true, where a skip would let the gate pass
// untested code (sdk/ tests use sdk/internal/testenv, the same rule). Tests and
// the benchmark tool (bench) use it; nothing in the berth binary
// imports it. (For ports, in-process agents and servers bind port 0 and
// advertise what they got; there is no "free port" helper, because a port
// found free can be taken before use.)
package testutil
