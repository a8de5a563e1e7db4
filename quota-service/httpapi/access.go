package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strings"
)

// Access is what one request may see.
type Access struct {
	// All: everything (Nomad runs without ACLs, or a management token).
	All bool
	// Namespaces are the Nomad namespaces whose jobs the token may list.
	Namespaces map[string]bool
	// Nodes: the token may read Nomad's nodes.
	Nodes bool
}

// Namespace reports whether the request may see the jobs of ns.
func (a Access) Namespace(ns string) bool { return a.All || a.Namespaces[ns] }

// Authorizer resolves the Nomad token a request carries ("" when none) to
// what it may see.
type Authorizer interface {
	Access(ctx context.Context, token string) (Access, error)
}

// Errors an Authorizer returns; any other error means it could not decide
// (Nomad unreachable), and the request is refused with 503.
var (
	// ErrTokenRequired: Nomad's ACLs are on and the request carries no
	// token (401).
	ErrTokenRequired = errors.New("a Nomad token is needed (Nomad's ACLs are on): send it in the X-Nomad-Token header, or log in at /login")
	// ErrTokenRejected: Nomad does not know the token, or it expired
	// (403).
	ErrTokenRejected = errors.New("the token was rejected by Nomad (unknown or expired)")
)

// tokenCookie holds the token of a person logged in to the dashboard.
const tokenCookie = "gpushare-nomad-token"

// requestToken is the Nomad token a request carries: the X-Nomad-Token
// header, an "Authorization: Bearer" header (as Nomad accepts, and as
// Prometheus sends), or the dashboard's login cookie. Never the URL: a
// token there ends up in logs and browser history.
func requestToken(r *http.Request) string {
	if t := strings.TrimSpace(r.Header.Get("X-Nomad-Token")); t != "" {
		return t
	}
	if t, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && strings.TrimSpace(t) != "" {
		return strings.TrimSpace(t)
	}
	if c, err := r.Cookie(tokenCookie); err == nil {
		return c.Value
	}
	return ""
}

// accessStatus is the HTTP status for an Authorizer's error.
func accessStatus(err error) int {
	switch {
	case errors.Is(err, ErrTokenRequired):
		return http.StatusUnauthorized
	case errors.Is(err, ErrTokenRejected):
		return http.StatusForbidden
	default:
		return http.StatusServiceUnavailable
	}
}
