// Package auth verifies OAuth2 access tokens issued by the MEC platform, as
// mec_common.auth.TokenVerifier does for the Python services: a JWT signed with EdDSA or
// RS256 by a key of the platform's JWKS (<platform>/oauth2/jwks), issuer "mec-platform",
// audience "mec-api", not expired. Notification tokens (audience "mec-notification") are
// refused by Verify, so a leaked one cannot call the API; VerifyNotification accepts only
// those, for the platform's notifications to us (mec_common.auth's verify_notification).
//
// ForService makes Verify demand a role (docs/security.md): the operator's scopes
// (mec.admin, mec.platform) or mec.consume:<service>, which the platform gives an app whose
// AppD requires the service. WithRevocations makes it refuse the subjects the platform
// lists at /oauth2/revocations (terminated or deleted app instances), as
// mec_common.auth.RevocationList does.
package auth

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"sync"
	"time"
)

const (
	issuer               = "mec-platform"
	apiAudience          = "mec-api"
	notificationAudience = "mec-notification"
	platformSubject      = "mec-platform"
)

// Platform verifies platform-issued tokens against the platform's JWKS.
type Platform struct {
	jwksURL string
	client  *http.Client
	service string       // "": any API token; else the operator or a consumer of it
	revoked *Revocations // nil: not checked

	mu       sync.Mutex
	keys     map[string]crypto.PublicKey
	fetched  time.Time
	verified map[string]verified // audience + " " + token, for tokens already checked
}

type verified struct {
	exp          time.Time
	sub          string
	scopes       []string
	subscription string // notification tokens: the subscription they serve
}

// NewPlatform returns a verifier for the JWKS at jwksURL (fetched on first use).
func NewPlatform(jwksURL string) *Platform {
	return &Platform{jwksURL: jwksURL, client: &http.Client{Timeout: 5 * time.Second},
		keys: map[string]crypto.PublicKey{}, verified: map[string]verified{}}
}

// ForService makes Verify accept only the operator (mec.admin, mec.platform) and apps
// with the scope mec.consume:<service>.
func (p *Platform) ForService(service string) *Platform { p.service = service; return p }

// WithRevocations makes every check refuse the subjects the platform revoked.
func (p *Platform) WithRevocations(r *Revocations) *Platform { p.revoked = r; return p }

// Verify implements mec012.Verifier: a token to call the API.
func (p *Platform) Verify(token string) bool {
	v, ok := p.verify(token, apiAudience)
	return ok && (p.service == "" || allowed(v.scopes, p.service))
}

// VerifyNotification accepts the token the platform sends with the notifications of one
// subscription (its URI, the token's subscription claim); "" (no subscription yet) accepts
// none.
func (p *Platform) VerifyNotification(token, subscription string) bool {
	v, ok := p.verify(token, notificationAudience)
	return ok && subscription != "" && v.subscription == subscription
}

func allowed(scopes []string, service string) bool {
	for _, s := range scopes {
		if s == "mec.admin" || s == "mec.platform" || s == "mec.consume:"+service {
			return true
		}
	}
	return false
}

func (p *Platform) verify(token, audience string) (verified, bool) {
	if strings.Count(token, ".") != 2 {
		return verified{}, false
	}
	now := time.Now()
	key := audience + " " + token
	p.mu.Lock()
	v, ok := p.verified[key]
	p.mu.Unlock()
	if !ok || !now.Before(v.exp) {
		var err error
		if v, err = p.check(token, audience, now); err != nil {
			return verified{}, false
		}
		p.mu.Lock()
		if len(p.verified) > 4096 {
			clear(p.verified) // bounded; simpler than an LRU
		}
		p.verified[key] = v
		p.mu.Unlock()
	}
	if p.revoked != nil && v.sub != platformSubject && p.revoked.Revoked(v.sub) {
		return verified{}, false
	}
	return v, true
}

type header struct {
	Alg string `json:"alg"`
	Kid string `json:"kid"`
}

type claims struct {
	Iss   string          `json:"iss"`
	Sub   string          `json:"sub"`
	Aud   json.RawMessage `json:"aud"`
	Exp   *float64        `json:"exp"`
	Iat   *float64        `json:"iat"`
	Scope string          `json:"scope"`
	// notification tokens: the subscription they serve
	Subscription string `json:"subscription"`
}

// check verifies a token for audience and returns its expiry, subject and scopes.
func (p *Platform) check(token, audience string, now time.Time) (verified, error) {
	exp, c, err := p.checkClaims(token, audience, now)
	if err != nil {
		return verified{}, err
	}
	return verified{exp: exp, sub: c.Sub, scopes: strings.Fields(c.Scope), subscription: c.Subscription}, nil
}

func (p *Platform) checkClaims(token, audience string, now time.Time) (time.Time, claims, error) {
	parts := strings.Split(token, ".")
	var h header
	var c claims
	if err := decodePart(parts[0], &h); err != nil {
		return time.Time{}, c, err
	}
	if err := decodePart(parts[1], &c); err != nil {
		return time.Time{}, c, err
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return time.Time{}, c, err
	}
	key, err := p.key(h.Kid)
	if err != nil {
		return time.Time{}, c, err
	}
	if err := verifySignature(h.Alg, key, []byte(parts[0]+"."+parts[1]), sig); err != nil {
		return time.Time{}, c, err
	}
	switch {
	case c.Iss != issuer || c.Sub == "" || c.Exp == nil || c.Iat == nil:
		return time.Time{}, c, errors.New("missing or wrong claims")
	case !hasAudience(c.Aud, audience):
		return time.Time{}, c, errors.New("wrong audience")
	}
	exp := time.Unix(0, int64(*c.Exp*1e9))
	if !now.Before(exp) {
		return time.Time{}, c, errors.New("expired")
	}
	return exp, c, nil
}

func decodePart(part string, v any) error {
	raw, err := base64.RawURLEncoding.DecodeString(part)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, v)
}

func hasAudience(raw json.RawMessage, want string) bool {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return one == want
	}
	var many []string
	if json.Unmarshal(raw, &many) == nil {
		for _, a := range many {
			if a == want {
				return true
			}
		}
	}
	return false
}

func verifySignature(alg string, key crypto.PublicKey, signed, sig []byte) error {
	switch k := key.(type) {
	case ed25519.PublicKey:
		if alg == "EdDSA" && ed25519.Verify(k, signed, sig) {
			return nil
		}
	case *rsa.PublicKey:
		digest := sha256.Sum256(signed)
		if alg == "RS256" && rsa.VerifyPKCS1v15(k, crypto.SHA256, digest[:], sig) == nil {
			return nil
		}
	}
	return errors.New("bad signature")
}

// key returns the JWKS key kid. The JWKS is fetched on first use, when it is older than
// 5 minutes, and for an unknown kid (key rotation), at most every 10 s.
func (p *Platform) key(kid string) (crypto.PublicKey, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	age := time.Since(p.fetched)
	if k, ok := p.keys[kid]; ok && age < 5*time.Minute {
		return k, nil
	}
	if age >= 10*time.Second {
		if keys, err := fetchJWKS(p.client, p.jwksURL); err == nil {
			p.keys = keys
		}
		p.fetched = time.Now()
	}
	if k, ok := p.keys[kid]; ok {
		return k, nil
	}
	return nil, fmt.Errorf("unknown key %q", kid)
}

type jwk struct {
	Kty, Crv, Kid, X, N, E string
}

func fetchJWKS(client *http.Client, url string) (map[string]crypto.PublicKey, error) {
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("JWKS: HTTP %d", resp.StatusCode)
	}
	var set struct{ Keys []jwk }
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 1<<20)).Decode(&set); err != nil {
		return nil, fmt.Errorf("JWKS: %w", err)
	}
	keys := map[string]crypto.PublicKey{}
	for _, k := range set.Keys {
		switch {
		case k.Kty == "OKP" && k.Crv == "Ed25519":
			x, err := base64.RawURLEncoding.DecodeString(k.X)
			if err == nil && len(x) == ed25519.PublicKeySize {
				keys[k.Kid] = ed25519.PublicKey(x)
			}
		case k.Kty == "RSA":
			n, err1 := base64.RawURLEncoding.DecodeString(k.N)
			e, err2 := base64.RawURLEncoding.DecodeString(k.E)
			if err1 == nil && err2 == nil && len(e) <= 4 {
				keys[k.Kid] = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
			}
		}
	}
	return keys, nil
}
