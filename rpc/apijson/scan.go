package apijson

import (
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// tokKind is the kind of one JSON token.
type tokKind uint8

const (
	tokEOF tokKind = iota
	tokBeginObject
	tokEndObject
	tokBeginArray
	tokEndArray
	tokColon
	tokComma
	tokString
	tokNumber
	tokTrue
	tokFalse
	tokNull
)

// token is one JSON token; text is a string's unescaped value or a number's
// literal text.
type token struct {
	kind tokKind
	text string
}

// scanner splits a JSON document into tokens. It checks each token's own
// syntax (string escapes and UTF-8, number grammar); the decoder checks how
// tokens follow each other, since it walks the document against the
// message anyway. encoding/json's token API allocates for every token,
// which made decoding a 1000-node page cost several times its encoding.
type scanner struct {
	data []byte
	pos  int
}

func (s *scanner) skipSpace() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// next reads the next token.
func (s *scanner) next() (token, error) {
	s.skipSpace()
	if s.pos >= len(s.data) {
		return token{kind: tokEOF}, nil
	}
	start := s.pos
	c := s.data[s.pos]
	switch c {
	case '{':
		s.pos++
		return token{kind: tokBeginObject}, nil
	case '}':
		s.pos++
		return token{kind: tokEndObject}, nil
	case '[':
		s.pos++
		return token{kind: tokBeginArray}, nil
	case ']':
		s.pos++
		return token{kind: tokEndArray}, nil
	case ':':
		s.pos++
		return token{kind: tokColon}, nil
	case ',':
		s.pos++
		return token{kind: tokComma}, nil
	case '"':
		str, err := s.str()
		return token{kind: tokString, text: str}, err
	case 't':
		return s.literal("true", tokTrue)
	case 'f':
		return s.literal("false", tokFalse)
	case 'n':
		return s.literal("null", tokNull)
	}
	if c == '-' || '0' <= c && c <= '9' {
		if err := s.number(); err != nil {
			return token{}, err
		}
		return token{kind: tokNumber, text: string(s.data[start:s.pos])}, nil
	}
	return token{}, s.errorf("invalid character %q", rune(c))
}

func (s *scanner) errorf(format string, args ...any) error {
	return fmt.Errorf("invalid JSON at offset %d: %s", s.pos, fmt.Sprintf(format, args...))
}

func (s *scanner) literal(word string, k tokKind) (token, error) {
	if len(s.data)-s.pos < len(word) || string(s.data[s.pos:s.pos+len(word)]) != word {
		return token{}, s.errorf("invalid literal (want %s)", word)
	}
	s.pos += len(word)
	return token{kind: k}, nil
}

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() error {
	digits := func() int {
		n := 0
		for s.pos < len(s.data) && '0' <= s.data[s.pos] && s.data[s.pos] <= '9' {
			s.pos++
			n++
		}
		return n
	}
	if s.data[s.pos] == '-' {
		s.pos++
	}
	switch {
	case s.pos < len(s.data) && s.data[s.pos] == '0':
		s.pos++
	case digits() == 0:
		return s.errorf("invalid number")
	}
	if s.pos < len(s.data) && s.data[s.pos] == '.' {
		s.pos++
		if digits() == 0 {
			return s.errorf("invalid number: no digits after the decimal point")
		}
	}
	if s.pos < len(s.data) && (s.data[s.pos] == 'e' || s.data[s.pos] == 'E') {
		s.pos++
		if s.pos < len(s.data) && (s.data[s.pos] == '+' || s.data[s.pos] == '-') {
			s.pos++
		}
		if digits() == 0 {
			return s.errorf("invalid number: no digits in the exponent")
		}
	}
	return nil
}

// str scans a string starting at its opening quote and returns its value.
// Invalid UTF-8 and unpaired surrogates are refused rather than replaced:
// a proto string must be valid UTF-8.
func (s *scanner) str() (string, error) {
	s.pos++ // the opening quote
	start := s.pos
	// Fast path: no escapes, so the value is the raw bytes.
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		if c == '"' {
			raw := s.data[start:s.pos]
			if !utf8.Valid(raw) {
				return "", s.errorf("string is not valid UTF-8")
			}
			s.pos++
			return string(raw), nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", s.errorf("control character %#x in a string", c)
		}
		s.pos++
	}
	buf := append([]byte(nil), s.data[start:s.pos]...)
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch {
		case c == '"':
			if !utf8.Valid(buf) {
				return "", s.errorf("string is not valid UTF-8")
			}
			s.pos++
			return string(buf), nil
		case c < 0x20:
			return "", s.errorf("control character %#x in a string", c)
		case c != '\\':
			buf = append(buf, c)
			s.pos++
			continue
		}
		if s.pos+1 >= len(s.data) {
			break
		}
		e := s.data[s.pos+1]
		s.pos += 2
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := s.hex4()
			if !ok {
				return "", s.errorf(`invalid \u escape`)
			}
			if utf16.IsSurrogate(r) {
				if s.pos+1 >= len(s.data) || s.data[s.pos] != '\\' || s.data[s.pos+1] != 'u' {
					return "", s.errorf("unpaired surrogate in a string")
				}
				s.pos += 2
				r2, ok := s.hex4()
				if !ok {
					return "", s.errorf(`invalid \u escape`)
				}
				if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
					return "", s.errorf("unpaired surrogate in a string")
				}
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return "", s.errorf("invalid escape \\%c", e)
		}
	}
	return "", s.errorf("unterminated string")
}

func (s *scanner) hex4() (rune, bool) {
	if len(s.data)-s.pos < 4 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(s.data[s.pos:s.pos+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	s.pos += 4
	return rune(n), true
}
