package auth

import "crypto/subtle"

// Verifier accepts a bearer token. Static tokens implement it; platform-issued JWTs
// (Platform) are another Verifier.
type Verifier interface {
	Verify(token string) bool
}

// StaticTokens accepts one of a fixed set of tokens (compared in constant time).
type StaticTokens []string

// Verify implements Verifier.
func (s StaticTokens) Verify(token string) bool {
	ok := 0
	for _, t := range s {
		ok |= subtle.ConstantTimeCompare([]byte(t), []byte(token))
	}
	return ok == 1 && token != ""
}

// Any tells whether one of verifiers accepts token.
func Any(verifiers []Verifier, token string) bool {
	for _, v := range verifiers {
		if v.Verify(token) {
			return true
		}
	}
	return false
}
