// Package testutil holds helpers shared by berth's tests: a manual clock, a
// logger that writes to t.Log (shown only when a test fails), free loopback
// ports and polling assertions. Nothing in production code imports it.
package testutil
