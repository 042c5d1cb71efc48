package hclsrc

import (
	"bytes"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// HCL 1, which the configs of Nomad and Consul were written in, accepted
// several arguments on one line and single-line blocks holding several
// arguments:
//
//	ports { http = 7646  rpc = 7647  raft = 7648 }
//	log_level = "info"   log_json = false
//
// HCL 2 wants a newline after every argument and after a block's closing
// brace. Rather than reject configs written in that compact style,
// SplitCompact inserts the missing newlines before parsing. A valid HCL 2
// file means the same after the split (only single-line blocks change, into
// the multi-line form), and positions are mapped back so that errors point
// into the file as written.

// LineSplit records where newlines were inserted into src.
type LineSplit struct {
	src []byte
	at  []int // ascending offsets in src before which a newline was inserted
}

// SplitCompact returns src with newlines inserted where the compact style
// left them out, and how to map positions back. It returns src unchanged and
// a nil *LineSplit when nothing needs inserting or the tokens do not nest
// properly, in which case the parser reports the problem on the original.
func SplitCompact(src []byte, filename string) ([]byte, *LineSplit) {
	toks, diags := hclsyntax.LexConfig(src, filename, hcl.InitialPos)
	if diags.HasErrors() {
		return src, nil
	}
	at, ok := compactSplitPoints(toks)
	if !ok || len(at) == 0 {
		return src, nil
	}
	out := make([]byte, 0, len(src)+len(at))
	prev := 0
	for _, off := range at {
		out = append(out, src[prev:off]...)
		out = append(out, '\n')
		prev = off
	}
	out = append(out, src[prev:]...)
	return out, &LineSplit{src: src, at: at}
}

// pos maps a position in the split source back into the original.
func (s *LineSplit) Pos(p hcl.Pos) hcl.Pos {
	b := p.Byte
	shift := 0
	for j, off := range s.at {
		if off+j < b {
			shift++
		}
	}
	o := min(max(b-shift, 0), len(s.src))
	before := s.src[:o]
	lineStart := bytes.LastIndexByte(before, '\n') + 1
	return hcl.Pos{
		Line:   bytes.Count(before, []byte{'\n'}) + 1,
		Column: utf8.RuneCount(before[lineStart:]) + 1,
		Byte:   o,
	}
}

type frameKind int

const (
	frameBody     frameKind = iota // the file, or a block's body
	frameExpr                      // ( [ { inside an expression
	frameTemplate                  // a quoted string or heredoc
	frameInterp                    // ${ or %{ inside a template
)

// stmtState is where a body is in its current statement.
type stmtState int

const (
	stmtStart      stmtState = iota // expecting an argument or a block
	stmtHeader                      // after a block's type, before its {
	stmtExpr                        // in an argument's value
	stmtAfterBlock                  // after a block's closing }
)

type frame struct {
	kind  frameKind
	open  hclsyntax.TokenType
	state stmtState
}

// compactSplitPoints walks the tokens and returns the offsets where a newline
// is missing; ok is false when the brackets do not balance.
func compactSplitPoints(toks hclsyntax.Tokens) (at []int, ok bool) {
	stack := []frame{{kind: frameBody}}
	var prev hclsyntax.TokenType // last token that is neither newline nor comment
	for i := 0; i < len(toks); i++ {
		tok := toks[i]
		top := &stack[len(stack)-1]
		if tok.Type == hclsyntax.TokenEOF {
			break
		}
		if tok.Type == hclsyntax.TokenComment {
			if endsLine(tok) && top.kind == frameBody {
				top.state = stmtStart
			}
			continue
		}

		switch top.kind {
		case frameBody:
			switch tok.Type {
			case hclsyntax.TokenNewline:
				top.state = stmtStart
			case hclsyntax.TokenIdent:
				if top.state == stmtAfterBlock || top.state == stmtExpr && endsExpr(prev) && startsStatement(toks, i) {
					if !isLineStart(toks, i) {
						at = append(at, tok.Range.Start.Byte)
					}
					top.state = stmtStart
				}
				if top.state == stmtStart {
					top.state = stmtHeader
					if next(toks, i) == hclsyntax.TokenEqual {
						top.state = stmtExpr
					}
				}
			case hclsyntax.TokenOBrace:
				if top.state != stmtHeader {
					stack = append(stack, frame{kind: frameExpr, open: tok.Type})
					break
				}
				stack = append(stack, frame{kind: frameBody, open: tok.Type})
				if n := i + 1; n < len(toks) && !opensLine(toks[n]) && toks[n].Type != hclsyntax.TokenCBrace {
					at = append(at, tok.Range.End.Byte)
				}
			case hclsyntax.TokenCBrace:
				if len(stack) == 1 {
					return nil, false
				}
				if p := toks[i-1]; p.Type != hclsyntax.TokenOBrace && !opensLine(p) {
					at = append(at, tok.Range.Start.Byte)
				}
				stack = stack[:len(stack)-1]
				stack[len(stack)-1].state = stmtAfterBlock
			case hclsyntax.TokenOBrack, hclsyntax.TokenOParen:
				stack = append(stack, frame{kind: frameExpr, open: tok.Type})
			case hclsyntax.TokenOQuote, hclsyntax.TokenOHeredoc:
				stack = append(stack, frame{kind: frameTemplate, open: tok.Type})
			case hclsyntax.TokenCBrack, hclsyntax.TokenCParen, hclsyntax.TokenCQuote,
				hclsyntax.TokenCHeredoc, hclsyntax.TokenTemplateSeqEnd:
				return nil, false
			}
		case frameExpr, frameInterp:
			switch tok.Type {
			case hclsyntax.TokenOBrace, hclsyntax.TokenOBrack, hclsyntax.TokenOParen:
				stack = append(stack, frame{kind: frameExpr, open: tok.Type})
			case hclsyntax.TokenOQuote, hclsyntax.TokenOHeredoc:
				stack = append(stack, frame{kind: frameTemplate, open: tok.Type})
			case hclsyntax.TokenCBrace, hclsyntax.TokenCBrack, hclsyntax.TokenCParen, hclsyntax.TokenTemplateSeqEnd:
				if closerOf(top) != tok.Type {
					return nil, false
				}
				stack = stack[:len(stack)-1]
			case hclsyntax.TokenCQuote, hclsyntax.TokenCHeredoc:
				return nil, false
			}
		case frameTemplate:
			switch tok.Type {
			case hclsyntax.TokenTemplateInterp, hclsyntax.TokenTemplateControl:
				stack = append(stack, frame{kind: frameInterp, open: tok.Type})
			case hclsyntax.TokenCQuote, hclsyntax.TokenCHeredoc:
				if closerOf(top) != tok.Type {
					return nil, false
				}
				stack = stack[:len(stack)-1]
			}
		}
		if tok.Type != hclsyntax.TokenNewline {
			prev = tok.Type
		}
	}
	return at, len(stack) == 1
}

func closerOf(f *frame) hclsyntax.TokenType {
	switch f.open {
	case hclsyntax.TokenOBrace:
		return hclsyntax.TokenCBrace
	case hclsyntax.TokenOBrack:
		return hclsyntax.TokenCBrack
	case hclsyntax.TokenOParen:
		return hclsyntax.TokenCParen
	case hclsyntax.TokenOQuote:
		return hclsyntax.TokenCQuote
	case hclsyntax.TokenOHeredoc:
		return hclsyntax.TokenCHeredoc
	default: // ${ and %{
		return hclsyntax.TokenTemplateSeqEnd
	}
}

// endsExpr reports whether an expression can end with a token of type t, so
// that an argument name after it starts the next argument.
func endsExpr(t hclsyntax.TokenType) bool {
	switch t {
	case hclsyntax.TokenIdent, hclsyntax.TokenNumberLit, hclsyntax.TokenCQuote, hclsyntax.TokenCHeredoc,
		hclsyntax.TokenCBrack, hclsyntax.TokenCParen, hclsyntax.TokenCBrace:
		return true
	}
	return false
}

// startsStatement reports whether the tokens at i are `name =` or a block
// header `type label... {`.
func startsStatement(toks hclsyntax.Tokens, i int) bool {
	j := i + 1
	if j < len(toks) && toks[j].Type == hclsyntax.TokenEqual {
		return true
	}
	for j < len(toks) {
		switch toks[j].Type {
		case hclsyntax.TokenIdent:
			j++
		case hclsyntax.TokenOQuote:
			j++
			if j < len(toks) && toks[j].Type == hclsyntax.TokenQuotedLit {
				j++
			}
			if j >= len(toks) || toks[j].Type != hclsyntax.TokenCQuote {
				return false
			}
			j++
		case hclsyntax.TokenOBrace:
			return true
		default:
			return false
		}
	}
	return false
}

func next(toks hclsyntax.Tokens, i int) hclsyntax.TokenType {
	if i+1 < len(toks) {
		return toks[i+1].Type
	}
	return hclsyntax.TokenEOF
}

// isLineStart reports whether token i is the first on its line.
func isLineStart(toks hclsyntax.Tokens, i int) bool {
	return i == 0 || opensLine(toks[i-1])
}

// opensLine reports whether a token ends a line, so the next one starts one.
func opensLine(t hclsyntax.Token) bool {
	return t.Type == hclsyntax.TokenNewline || t.Type == hclsyntax.TokenComment && endsLine(t)
}

// endsLine reports whether a comment token is a line comment; HCL includes
// the newline in those.
func endsLine(t hclsyntax.Token) bool {
	return strings.HasSuffix(string(t.Bytes), "\n")
}
