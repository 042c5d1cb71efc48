package hclsrc

import (
	"bytes"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
)

// JSONRootArray reports whether a JSON file's root is an array and where
// its "[" is. HCL's JSON syntax allows an array of objects at the root;
// berth does not, so that every key of a file is found in one object and an
// unknown one can be reported.
func JSONRootArray(src []byte) (pos hcl.Pos, ok bool) {
	body := bytes.TrimLeft(src, " \t\r\n")
	if len(body) == 0 || body[0] != '[' {
		return hcl.Pos{}, false
	}
	off := len(src) - len(body)
	lineStart := bytes.LastIndexByte(src[:off], '\n') + 1
	return hcl.Pos{
		Line:   bytes.Count(src[:off], []byte{'\n'}) + 1,
		Column: utf8.RuneCount(src[lineStart:off]) + 1,
		Byte:   off,
	}, true
}

// DropRootEcho removes the "root value must be object" diagnostic HCL's
// JSON parser adds after any syntax error inside the root object, although
// the root is an object. The parser appends it last, pointing at the root's
// opening brace.
func DropRootEcho(src []byte, diags hcl.Diagnostics) hcl.Diagnostics {
	if len(diags) < 2 {
		return diags
	}
	body := bytes.TrimLeft(src, " \t\r\n")
	if len(body) == 0 || body[0] != '{' {
		return diags
	}
	last := diags[len(diags)-1]
	if last.Subject == nil || last.Subject.Start.Byte != len(src)-len(body) {
		return diags
	}
	return diags[:len(diags)-1]
}
