// Package hclsrc holds what berth's two HCL readers — the agent
// configuration (host/agent) and the job spec (host/jobspec) — share about
// reading a file before decoding it, so both accept the same files and
// phrase the same problems the same way:
//
//   - SplitCompact accepts HCL 1's compact style (several arguments on a
//     line, single-line blocks holding several arguments) by inserting the
//     newlines HCL 2 wants, and LineSplit.Pos maps positions back into the
//     file as written.
//   - JSONRootArray and DropRootEcho tidy what HCL's JSON parser says about
//     a file's root: berth wants one object there, and the parser adds a
//     misleading "root value must be object" after any syntax error.
//   - Suggest picks the known key a misspelt one was probably meant to be,
//     for "did you mean" hints.
//
// The package decodes nothing itself: schemas, error types and their codes
// belong to each reader.
package hclsrc
