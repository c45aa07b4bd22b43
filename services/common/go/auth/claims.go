package auth

import "strings"

// AppInstanceOf is the app instance a platform-issued token was issued to (its
// app_instance_id claim); "" for a static token or a token without one. It does not verify
// the token: call it only on a token a Verifier has accepted.
func AppInstanceOf(token string) string {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return ""
	}
	var c struct {
		AppInstanceID string `json:"app_instance_id"`
	}
	if decodePart(parts[1], &c) != nil {
		return ""
	}
	return c.AppInstanceID
}

// BearerToken is the token of a request's Authorization: Bearer header ("" if none).
func BearerToken(header string) string {
	token, _ := strings.CutPrefix(header, "Bearer ")
	return strings.TrimSpace(token)
}
