package flexran

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// scanner reads JSON in one pass without building a tree: the parser visits the keys it
// needs and skips everything else. Most of a FlexRAN document (PDCP and UL statistics,
// slice configuration, ...) is skipped, which is what makes a 64-UE poll cheap.
type scanner struct {
	b []byte
	i int
}

var errEnd = errors.New("unexpected end of JSON")

func (s *scanner) syntax(want string) error {
	if s.i >= len(s.b) {
		return errEnd
	}
	return fmt.Errorf("invalid JSON at offset %d: want %s, found %q", s.i, want, s.b[s.i])
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// next returns the next non-space byte without consuming it (0 at the end).
func (s *scanner) next() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// kind is the JSON type of the next value: 'o'bject, 'a'rray, 's'tring, 'n'umber, 'l'iteral.
func (s *scanner) kind() byte {
	switch c := s.next(); {
	case c == '{':
		return 'o'
	case c == '[':
		return 'a'
	case c == '"':
		return 's'
	case c == '-' || (c >= '0' && c <= '9'):
		return 'n'
	case c == 't' || c == 'f' || c == 'n':
		return 'l'
	}
	return 0
}

// object calls fn for each key; fn must consume the value (read it or skip it).
func (s *scanner) object(fn func(key []byte) error) error {
	if s.next() != '{' {
		return s.syntax("an object")
	}
	s.i++
	if s.next() == '}' {
		s.i++
		return nil
	}
	for {
		key, err := s.str()
		if err != nil {
			return err
		}
		if s.next() != ':' {
			return s.syntax("':'")
		}
		s.i++
		if err := fn(key); err != nil {
			return err
		}
		switch s.next() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return s.syntax("',' or '}'")
		}
	}
}

// array calls fn for each element; fn must consume it.
func (s *scanner) array(fn func(i int) error) error {
	if s.next() != '[' {
		return s.syntax("an array")
	}
	s.i++
	if s.next() == ']' {
		s.i++
		return nil
	}
	for n := 0; ; n++ {
		if err := fn(n); err != nil {
			return err
		}
		switch s.next() {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		default:
			return s.syntax("',' or ']'")
		}
	}
}

// str reads a string. Escapes are decoded only when present (never in FlexRAN's keys).
func (s *scanner) str() ([]byte, error) {
	if s.next() != '"' {
		return nil, s.syntax("a string")
	}
	start := s.i + 1
	end := bytes.IndexByte(s.b[start:], '"')
	if end < 0 {
		return nil, errEnd
	}
	raw := s.b[start : start+end]
	if bytes.IndexByte(raw, '\\') < 0 {
		s.i = start + end + 1
		return raw, validText(raw)
	}
	for j := start; j < len(s.b); j++ { // find the closing quote past escapes
		switch s.b[j] {
		case '\\':
			j++
		case '"':
			quoted := s.b[start-1 : j+1]
			s.i = j + 1
			out, err := strconv.Unquote(string(quoted))
			if err != nil {
				return nil, fmt.Errorf("invalid JSON string at offset %d", start)
			}
			return []byte(out), nil
		}
	}
	return nil, errEnd
}

func validText(raw []byte) error {
	for _, c := range raw {
		if c < 0x20 {
			return errors.New("invalid JSON: control character in a string")
		}
	}
	return nil
}

// skip consumes any value. Objects and arrays are skipped by matching brackets outside
// strings (the parts the adapter ignores are most of a document, so this is the hot loop);
// their inner punctuation is not checked.
func (s *scanner) skip() error {
	switch s.kind() {
	case 'o', 'a':
		return s.skipNested()
	case 's':
		_, err := s.str()
		return err
	case 'n':
		_, err := s.number()
		return err
	case 'l':
		for _, lit := range []string{"true", "false", "null"} {
			if bytes.HasPrefix(s.b[s.i:], []byte(lit)) {
				s.i += len(lit)
				return nil
			}
		}
	}
	return s.syntax("a value")
}

func (s *scanner) skipNested() error {
	var stack [64]byte // expected closing brackets; deeper nesting is refused
	depth := 0
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch c {
		case '"':
			if _, err := s.str(); err != nil {
				return err
			}
			continue
		case '{', '[':
			if depth == len(stack) {
				return fmt.Errorf("invalid JSON: nesting deeper than %d at offset %d", len(stack), s.i)
			}
			stack[depth] = c + 2 // '{'+2 = '}', '['+2 = ']'
			depth++
		case '}', ']':
			if depth == 0 || stack[depth-1] != c {
				return s.syntax("a matching bracket")
			}
			depth--
			if depth == 0 {
				s.i++
				return nil
			}
		}
		s.i++
	}
	return errEnd
}

// number consumes a JSON number and returns its text.
func (s *scanner) number() ([]byte, error) {
	s.ws()
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		if (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' {
			s.i++
			continue
		}
		break
	}
	if start == s.i {
		return nil, s.syntax("a number")
	}
	return s.b[start:s.i], nil
}

// errType is a value of the wrong type or range: the UE entry is skipped, not the document.
type errType struct{ msg string }

func (e *errType) Error() string { return e.msg }

// int reads an integer: a JSON number, or a string of digits (protobuf-JSON writes 64-bit
// values as strings). null is unset. Anything else is consumed and reported as errType.
func (s *scanner) int(key []byte) (Int, error) {
	switch s.kind() {
	case 'n':
		text, err := s.number()
		if err != nil {
			return Int{}, err
		}
		return parseInt(key, text)
	case 's':
		text, err := s.str()
		if err != nil {
			return Int{}, err
		}
		return parseInt(key, text)
	case 'l':
		if bytes.HasPrefix(s.b[s.i:], []byte("null")) {
			s.i += 4
			return Int{}, nil
		}
	}
	if err := s.skip(); err != nil {
		return Int{}, err
	}
	return Int{}, &errType{fmt.Sprintf("%s is not an integer", key)}
}

func parseInt(key, text []byte) (Int, error) {
	n, err := strconv.ParseInt(string(text), 10, 64) // string(text) does not allocate here
	if err != nil {
		return Int{}, &errType{fmt.Sprintf("%s: %q is not an integer", key, text)}
	}
	return Some(n), nil
}

// text reads a string value; another type is consumed and gives ok=false.
func (s *scanner) text() (b []byte, ok bool, err error) {
	if s.kind() != 's' {
		return nil, false, s.skip()
	}
	b, err = s.str()
	return b, err == nil, err
}

// end checks that only whitespace follows the document.
func (s *scanner) end() error {
	if s.next() != 0 {
		return s.syntax("the end of the document")
	}
	return nil
}
