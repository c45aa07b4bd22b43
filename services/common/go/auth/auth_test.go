package auth

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func sign(t *testing.T, key ed25519.PrivateKey, head, claims map[string]any) string {
	t.Helper()
	enc := func(v any) string {
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(raw)
	}
	signed := enc(head) + "." + enc(claims)
	return signed + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(key, []byte(signed)))
}

func TestPlatformTokens(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	jwks := map[string]any{"keys": []map[string]string{{"kty": "OKP", "crv": "Ed25519", "kid": "k1",
		"x": base64.RawURLEncoding.EncodeToString(pub)}}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(jwks)
	}))
	defer srv.Close()
	p := NewPlatform(srv.URL)
	now := float64(time.Now().Unix())
	good := map[string]any{"iss": "mec-platform", "aud": "mec-api", "sub": "app", "iat": now, "exp": now + 60}
	with := func(k string, v any) map[string]any {
		c := map[string]any{}
		for key, val := range good {
			c[key] = val
		}
		c[k] = v
		return c
	}
	head := map[string]any{"alg": "EdDSA", "kid": "k1"}
	cases := map[string]struct {
		token string
		ok    bool
	}{
		"valid":         {sign(t, priv, head, good), true},
		"audience list": {sign(t, priv, head, with("aud", []string{"x", "mec-api"})), true},
		"expired":       {sign(t, priv, head, with("exp", now-1)), false},
		"notification":  {sign(t, priv, head, with("aud", "mec-notification")), false},
		"issuer":        {sign(t, priv, head, with("iss", "someone")), false},
		"other key":     {sign(t, other, head, good), false},
		"unknown kid":   {sign(t, priv, map[string]any{"alg": "EdDSA", "kid": "k2"}, good), false},
		"alg mismatch":  {sign(t, priv, map[string]any{"alg": "RS256", "kid": "k1"}, good), false},
		"not a JWT":     {"static-looking-token", false},
		"garbage parts": {"a.b.c", false},
		"no subject":    {sign(t, priv, head, with("sub", "")), false},
	}
	for name, c := range cases {
		if got := p.Verify(c.token); got != c.ok {
			t.Errorf("%s: Verify = %v, want %v", name, got, c.ok)
		}
	}
	// Notification tokens are accepted only as such, and API tokens never as notifications
	// (both ways also after the other audience's result was cached).
	// A notification token serves one subscription: another subscription's is refused.
	noteOf := func(sub string) map[string]any {
		c := with("aud", "mec-notification")
		c["subscription"] = sub
		return c
	}
	note := sign(t, priv, head, noteOf("ours"))
	for name, c := range map[string]struct {
		token string
		ok    bool
	}{
		"notification":         {note, true},
		"another subscription": {sign(t, priv, head, noteOf("theirs")), false},
		"no subscription":      {sign(t, priv, head, with("aud", "mec-notification")), false},
		"api token":            {cases["valid"].token, false},
		"expired notification": {sign(t, priv, head, map[string]any{"iss": "mec-platform", "aud": "mec-notification", "sub": "mec-platform", "iat": now, "exp": now - 1}), false},
		"other key":            {sign(t, other, head, with("aud", "mec-notification")), false},
	} {
		if got := p.VerifyNotification(c.token, "ours"); got != c.ok {
			t.Errorf("%s: VerifyNotification = %v, want %v", name, got, c.ok)
		}
	}
	if p.Verify(note) {
		t.Error("a notification token verified for the API after it verified as a notification")
	}
}

// Scopes and revocation: ForService demands the operator or a consumer of the service;
// WithRevocations refuses listed subjects, also for tokens already verified (cached), and
// everything once the list cannot be had.
func TestScopesAndRevocations(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	revoked := `{"revoked": []}`
	reachable := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case !reachable:
			w.WriteHeader(http.StatusServiceUnavailable)
		case r.URL.Path == "/oauth2/revocations":
			_, _ = w.Write([]byte(revoked))
		default:
			_ = json.NewEncoder(w).Encode(map[string]any{"keys": []map[string]string{{"kty": "OKP",
				"crv": "Ed25519", "kid": "k1", "x": base64.RawURLEncoding.EncodeToString(pub)}}})
		}
	}))
	defer srv.Close()
	list := NewRevocations(srv.URL + "/oauth2/revocations")
	list.Refresh = 0 // fetch on every use
	p := NewPlatform(srv.URL + "/oauth2/jwks").ForService("rnis").WithRevocations(list)
	now := float64(time.Now().Unix())
	token := func(sub, scope string) string {
		return sign(t, priv, map[string]any{"alg": "EdDSA", "kid": "k1"}, map[string]any{"iss": "mec-platform",
			"aud": "mec-api", "sub": sub, "iat": now, "exp": now + 60, "scope": scope})
	}
	consumer, other := token("app-a", "mec.app mec.consume:rnis"), token("app-b", "mec.app mec.consume:pep")
	admin := token("admin", "mec.admin")
	for name, c := range map[string]struct {
		token string
		ok    bool
	}{"consumer": {consumer, true}, "not a consumer": {other, false}, "admin": {admin, true},
		"no scope": {token("app-c", ""), false}} {
		if got := p.Verify(c.token); got != c.ok {
			t.Errorf("%s: Verify = %v, want %v", name, got, c.ok)
		}
	}
	revoked = `{"revoked": [{"sub": "app-a", "until": 1}]}`
	if p.Verify(consumer) {
		t.Error("a revoked subject's (cached) token is still accepted")
	}
	if !p.Verify(admin) {
		t.Error("revoking one subject refused another")
	}
	reachable = false
	list.MaxStale = 0
	if p.Verify(admin) {
		t.Error("a stale revocation list must fail closed")
	}
}
