// Package apijson is the one JSON encoding of berth's protobuf messages
// (rpc/pb): the HTTP API writes it, the Go API client (rpc/api) reads it and
// every CLI -json prints it, so what a script sees with curl is what the CLI
// prints. It walks messages with protoreflect in both directions; there are
// no mirror structs to keep in step with the .proto files.
//
// It is not protojson. protojson follows the proto3 JSON mapping, which is
// built for round-tripping any message, not for people reading it: 64-bit
// integers become strings, enums keep their proto names (NODE_STATUS_READY)
// and zero values are left out. The rules here:
//
//   - Field names are the proto names (snake_case), in declaration order.
//     Every field is written: false, 0, "", [] and {} appear rather than
//     being omitted. A message field that is not set is null, as is an
//     unset oneof member or proto3 optional field; a oneof therefore shows
//     all its members, one of them non-null.
//   - Enums are short lowercase words: the value name without the prefix
//     common to the enum's values (the zero value's name minus
//     "UNSPECIFIED", NODE_STATUS_ for NodeStatus), lowercased, '_' turned
//     into '-': NODE_STATUS_READY is "ready", ACCESS_MODE_SINGLE_NODE_WRITER
//     would be "single-node-writer". The zero value is its word too
//     ("unspecified"), so a reader never meets a missing status. A number
//     this version does not know (a newer server's value) is written as the
//     JSON number itself; Unmarshal accepts the word or any number.
//   - Times. Our protos carry instants as int64 unix nanoseconds in fields
//     whose name ends in "_at" (registered_at, status_updated_at, ...);
//     they are written as RFC 3339 strings in UTC with as many fractional
//     digits as needed ("2026-11-23T20:34:35.61Z"), and 0 — never set — as
//     null. Unmarshal reads RFC 3339 (any offset) back to the exact
//     nanosecond, and refuses what time.Parse lets through but would not
//     read back exactly or is not RFC 3339: more than nine fractional
//     digits, a decimal comma, a one-digit hour. Inside a list or a field
//     with presence (oneof, optional) 0 is the epoch, since null there
//     would mean "absent". A time is known by its field's name alone, so a
//     test over every rpc/pb message holds each field named *_at to be an
//     int64 (a map or a string so named fails it); map values are never
//     times.
//   - Durations are integer fields whose name carries the unit (max_wait_ms,
//     heartbeat_ttl_ms, timeout_nanos) and are written as plain JSON numbers
//     in that unit. The unit is in the name, so nothing needs parsing.
//   - Integers of every width, 64-bit included (raft indexes, byte counts),
//     are JSON numbers written exactly; Unmarshal parses the number's text,
//     never through float64, and refuses fractions, exponents and quoted
//     numbers. Floating point fields are numbers, or "NaN", "Infinity" and
//     "-Infinity".
//   - A driver's task config (driver.v1.ConfigValue, in Task.config and
//     a driver schema's defaults) is the plain JSON value a user writes in
//     a job file, as Nomad's API takes it: "command": "sleep",
//     "args": ["-c", "x"], a whole number, true or false, an object of
//     strings; never the oneof that carries it over the wire. A duration is
//     written as Go writes one ("1m30s") and reads back as that string,
//     which the driver's schema turns into a duration again when the job
//     is checked; an empty value is null, also as a map value.
//   - Maps are objects with keys in sorted order (numeric order for integer
//     keys); bytes are standard base64 with padding, in its one canonical
//     spelling (Unmarshal refuses line breaks and non-zero padding bits);
//     nested and repeated messages are objects and arrays.
//
// Unmarshal is strict, because a misspelt field silently ignored is a
// configuration the user did not get: unknown fields, duplicate fields,
// wrong JSON types, unknown enum words, two members of one oneof, strings
// that are not valid UTF-8 (a proto string must be) and trailing data are
// errors. It reads the document with its own small scanner, which accepts
// only what encoding/json's json.Valid does (FuzzUnmarshal checks this). Each is an *Error naming the JSON path of the
// value at fault, such as `nodes[3].status: unknown value "redy"`. null is
// accepted for any field and leaves it unset (or empty).
//
// Marshal writes indented JSON (two spaces), the form curl users read;
// MarshalList and UnmarshalList handle the JSON arrays that list endpoints
// return. Encoding refuses a nil message (Marshal(nil), a nil element of a
// list) rather than writing null, which decoding refuses: what Marshal
// writes, Unmarshal reads.
package apijson
