// Package hclsrc is the one HCL kit of berth's three file readers — the job
// spec (host/jobspec), the volume spec (host/volumespec) and the agent
// configuration (host/agent) — so that they accept the same files, point at
// problems the same way and report them as the same error type.
//
// A reader makes a Decoder per file, with its own sentinel errors (Kinds)
// and wording (Style), and walks the file:
//
//	d := &hclsrc.Decoder{Kinds: kinds, Style: style}
//	body := d.Parse(filename, src, "job file") // nil: d.Errs says why
//	c := d.Content(body, hclsrc.FieldPath(""), hclsrc.Schema{Attrs: []string{"name"}, Blocks: hclsrc.Blocks("server")})
//	name, ok := hclsrc.Read(d, c.Attributes["name"], hclsrc.FieldPath("name"), d.Style.String)
//	server := d.Single(c.Blocks, "server", hclsrc.FieldPath(""))
//
// Parse reads HCL, or HCL's JSON syntax for .json files; Content reports
// every key the schema lacks with the key it was probably meant to be
// (Suggest), and a block written as an argument or the reverse; Single
// reports a block given twice; Eval and Value evaluate an argument without
// variables or functions, and the Style conversions (String, Bool, Int64,
// IntIn, Uint64, Duration, List, Text) and Decoder.StringList and
// StringMap read typed values strictly. Every problem is collected, not
// just the first, in Decoder.Errs; a Decoder can also record where each
// field was written (Where) and which paths were reported (Reported), so a
// reader's validation can blame a position and stay quiet about a value it
// could not read.
//
// The one error type is *Error: a position, a field path, a message and
// the reader's sentinel kind, formatted "file:line:col: path: message";
// Errors is a list of them, one per line. Problems with one value are
// *ValueError with a Class (WrongType or Invalid), which Kinds turns into
// the reader's sentinel.
//
// Below the Decoder are the pieces it is made of, also used alone:
// SplitCompact accepts HCL 1's compact style (several arguments on a line,
// single-line blocks holding several arguments) by inserting the newlines
// HCL 2 wants, and LineSplit.Pos maps positions back into the file as
// written; JSONRootArray and DropRootEcho tidy what HCL's JSON parser says
// about a file's root; NumberText prints a number from a file without
// spelling out 1e9999999.
//
// What stays with each reader: its schemas, its sentinels, the checks of
// its values, and the Style that keeps the wording its users know (the
// agent names a key in its message, the specs lead with the field path).
package hclsrc
