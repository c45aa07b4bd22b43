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
	// Every UE's rlcReport and gtpStats entries, each in one slice: a few allocations per
	// document, not several per UE.
	rlc   []RLCReport
	erabs []int64

	ues, maxUEs int // expected and largest number of UEs of a station (Parser.ues)
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
	if s.i < len(s.b) && s.b[s.i] > ' ' { // compact JSON: no space to skip
		return s.b[s.i]
	}
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
// FlexRAN's strings are short: one byte loop beats searching for the quote, then for a
// backslash, then checking for control characters.
func (s *scanner) str() ([]byte, error) {
	if s.next() != '"' {
		return nil, s.syntax("a string")
	}
	start := s.i + 1
	for j := start; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			s.i = j + 1
			return s.b[start:j], nil
		case c == '\\':
			return s.escaped(start)
		case c < 0x20:
			return nil, errors.New("invalid JSON: control character in a string")
		}
	}
	return nil, errEnd
}

// escaped reads a string with escapes that starts at start (after its quote).
func (s *scanner) escaped(start int) ([]byte, error) {
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

// structural marks the bytes skipNested must look at.
var structural = [256]bool{'"': true, '{': true, '}': true, '[': true, ']': true}

func (s *scanner) skipNested() error {
	var stack [64]byte // expected closing brackets; deeper nesting is refused
	depth := 0
	b := s.b
	for s.i < len(b) {
		if !structural[b[s.i]] { // most bytes: digits, letters, ',' and ':'
			s.i++
			continue
		}
		c := b[s.i]
		switch c {
		case '"':
			if err := s.skipString(); err != nil {
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

// skipString consumes a string; one with escapes or control characters is read by str, which
// checks them.
func (s *scanner) skipString() error {
	b := s.b
	for j := s.i + 1; j < len(b); j++ {
		if !stringSpecial[b[j]] {
			continue
		}
		if b[j] == '"' {
			s.i = j + 1
			return nil
		}
		_, err := s.str()
		return err
	}
	return errEnd
}

// stringSpecial marks the bytes that end a string's plain run: the quote, a backslash and
// control characters.
var stringSpecial = func() (t [256]bool) {
	for c := range 0x20 {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

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
	if n, ok := smallInt(text); ok {
		return Some(n), nil
	}
	n, err := strconv.ParseInt(string(text), 10, 64) // string(text) does not allocate here
	if err != nil {
		return Int{}, &errType{fmt.Sprintf("%s: %q is not an integer", key, text)}
	}
	return Some(n), nil
}

// smallInt reads the common case, up to 18 decimal digits with an optional '-', without
// strconv's generality; anything else (and every error) goes to strconv.
func smallInt(text []byte) (int64, bool) {
	digits := text
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if len(digits) < len(text) {
		n = -n
	}
	return n, true
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
