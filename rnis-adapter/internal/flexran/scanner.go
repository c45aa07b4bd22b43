package flexran

import "errors"

// Scanner is this package's one-pass JSON reader for the adapter's other source (the E2
// stream, internal/e2): the adapter's hand-written JSON reading has one owner.
type Scanner struct{ s scanner }

// NewScanner reads doc.
func NewScanner(doc []byte) *Scanner { return &Scanner{s: scanner{b: doc}} }

// Kind is the JSON type of the next value: 'o'bject, 'a'rray, 's'tring, 'n'umber,
// 'l'iteral, 0 at the end or on a byte that starts no value.
func (x *Scanner) Kind() byte { return x.s.kind() }

// Object calls fn for each key; fn must consume the value (read or skip it).
func (x *Scanner) Object(fn func(key []byte) error) error { return x.s.object(fn) }

// Array calls fn for each element; fn must consume it.
func (x *Scanner) Array(fn func(i int) error) error { return x.s.array(fn) }

// Int reads an integer (or a string of digits); null is unset. A value of another type is
// consumed and gives an error for which IsTypeError is true.
func (x *Scanner) Int(key []byte) (Int, error) { return x.s.int(key) }

// Text reads a string; another type is consumed and gives ok=false. The bytes are valid
// until the document changes.
func (x *Scanner) Text() (b []byte, ok bool, err error) { return x.s.text() }

// Skip consumes any value.
func (x *Scanner) Skip() error { return x.s.skip() }

// End checks that only whitespace follows.
func (x *Scanner) End() error { return x.s.end() }

// IsTypeError tells whether err is a value of the wrong type (the document is still JSON).
func IsTypeError(err error) bool {
	if err == nil {
		return false // the common case: no allocation for errors.As
	}
	var t *errType
	return errors.As(err, &t)
}
