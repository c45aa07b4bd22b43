package svc

// Links that work from every client network (mec_common.public_url is the Python twin): a
// service advertises one public base URL in its links, Location headers and ProblemDetails
// instance; X-Forwarded-Proto/Host/Prefix are honoured only from a trusted proxy's address,
// and then the public base in the answer is rewritten to the forwarded one.

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

type baseKey struct{}

// ParsePrefixes parses CIDRs (a bare address is a /32 or /128).
func ParsePrefixes(cidrs []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, c := range cidrs {
		if !strings.Contains(c, "/") {
			a, err := netip.ParseAddr(c)
			if err != nil {
				return nil, fmt.Errorf("trusted proxy %q: %w", c, err)
			}
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q: %w", c, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// PublicBase serves h with the request's public base URL in its context (BaseURL reads it):
// publicURL, or the forwarded base of a request from a trusted proxy, whose answer then has
// publicURL replaced by the forwarded base in its body and Location.
func PublicBase(publicURL string, trusted []netip.Prefix, h http.Handler) http.Handler {
	publicURL = strings.TrimSuffix(publicURL, "/")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		base := forwardedBase(r, trusted)
		if base == "" || base == publicURL {
			h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), baseKey{}, publicURL)))
			return
		}
		rw := &rewriting{header: http.Header{}}
		h.ServeHTTP(rw, r.WithContext(context.WithValue(r.Context(), baseKey{}, base)))
		body := bytes.ReplaceAll(rw.body.Bytes(), []byte(publicURL), []byte(base))
		for k, v := range rw.header {
			w.Header()[k] = v
		}
		if loc := w.Header().Get("Location"); loc != "" {
			w.Header().Set("Location", strings.Replace(loc, publicURL, base, 1))
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		if rw.status == 0 {
			rw.status = http.StatusOK
		}
		w.WriteHeader(rw.status)
		_, _ = w.Write(body)
	})
}

// forwardedBase is the base a trusted proxy says the client used ("" for anyone else).
func forwardedBase(r *http.Request, trusted []netip.Prefix) string {
	host := first(r.Header.Get("X-Forwarded-Host"))
	if host == "" || len(trusted) == 0 {
		return ""
	}
	ip, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return ""
	}
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return ""
	}
	addr = addr.Unmap()
	for _, p := range trusted {
		if p.Contains(addr) {
			scheme := first(r.Header.Get("X-Forwarded-Proto"))
			if scheme == "" {
				scheme = "http"
			}
			return scheme + "://" + host + strings.TrimSuffix(first(r.Header.Get("X-Forwarded-Prefix")), "/")
		}
	}
	return ""
}

func first(list string) string {
	v, _, _ := strings.Cut(list, ",")
	return strings.TrimSpace(v)
}

// BaseURL is the request's public base URL (PublicBase), else the one the client used.
func BaseURL(r *http.Request) string {
	if base, ok := r.Context().Value(baseKey{}).(string); ok && base != "" {
		return base
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

type rewriting struct {
	header http.Header
	body   bytes.Buffer
	status int
}

func (w *rewriting) Header() http.Header { return w.header }
func (w *rewriting) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.body.Write(b)
}
func (w *rewriting) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}
