package httpapi

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
)

// Defaults of NomadAccess.
const (
	// DefaultAccessTTL is how long a token's access is reused: a token
	// revoked or a policy narrowed in Nomad shows within this time.
	DefaultAccessTTL = 10 * time.Second
	// aclModeTTL is how long a reading of whether Nomad's ACLs are on is
	// reused.
	aclModeTTL = time.Minute
	// accessCacheMax bounds the cached tokens.
	accessCacheMax = 1024
	// probeParallel bounds the namespace probes of one token in flight.
	probeParallel = 4
)

// NomadAccess resolves tokens with Nomad's own API, so Nomad's ACL rules
// (policies, roles, globs, expiry) decide:
//
//   - whether ACLs are on: GET /v1/acl/policies answers "ACL support
//     disabled" when they are off, and every request may see everything;
//   - the token: GET /v1/acl/token/self with it (a management token sees
//     everything; an unknown or expired one is rejected);
//   - its namespaces: GET /v1/namespaces with it (Nomad lists those the
//     token has any capability in), then GET /v1/jobs?namespace=NS&per_page=1
//     for each, kept where Nomad lets it list jobs;
//   - nodes (nodes out of planning): GET /v1/nodes?per_page=1 with it.
//
// Results are cached by a hash of the token for TTL.
type NomadAccess struct {
	nomad *nomadapi.Client
	ttl   time.Duration

	mu      sync.Mutex
	aclsOn  *bool
	aclRead time.Time
	cache   map[[32]byte]cachedAccess
}

type cachedAccess struct {
	access Access
	err    error
	until  time.Time
}

// NewNomadAccess resolves tokens through client (its address and TLS
// settings; its own token only to learn whether ACLs are on). ttl <= 0
// means DefaultAccessTTL.
func NewNomadAccess(client *nomadapi.Client, ttl time.Duration) *NomadAccess {
	if ttl <= 0 {
		ttl = DefaultAccessTTL
	}
	return &NomadAccess{nomad: client, ttl: ttl, cache: map[[32]byte]cachedAccess{}}
}

// Access implements Authorizer.
func (n *NomadAccess) Access(ctx context.Context, token string) (Access, error) {
	on, err := n.aclsEnabled(ctx)
	if err != nil {
		return Access{}, err
	}
	if !on {
		return Access{All: true}, nil
	}
	if token == "" {
		return Access{}, ErrTokenRequired
	}
	key := sha256.Sum256([]byte(token))
	now := time.Now()
	n.mu.Lock()
	c, ok := n.cache[key]
	n.mu.Unlock()
	if ok && now.Before(c.until) {
		return c.access, c.err
	}
	access, err := n.resolve(ctx, token)
	if err != nil && !errors.Is(err, ErrTokenRejected) {
		return Access{}, err // Nomad could not say: ask again next time
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.cache) >= accessCacheMax {
		for k, c := range n.cache {
			if !now.Before(c.until) {
				delete(n.cache, k)
			}
		}
		if len(n.cache) >= accessCacheMax {
			clear(n.cache)
		}
	}
	n.cache[key] = cachedAccess{access: access, err: err, until: now.Add(n.ttl)}
	return access, err
}

// aclsEnabled reports whether Nomad's ACLs are on, asking Nomad at most
// once a minute. Until Nomad has answered once it refuses (fails closed).
func (n *NomadAccess) aclsEnabled(ctx context.Context) (bool, error) {
	n.mu.Lock()
	known, read := n.aclsOn, n.aclRead
	n.mu.Unlock()
	if known != nil && time.Since(read) < aclModeTTL {
		return *known, nil
	}
	_, _, err := n.nomad.ACLPolicies().List((&nomadapi.QueryOptions{}).WithContext(ctx))
	var on bool
	switch {
	case err == nil:
		on = true
	case strings.Contains(err.Error(), "ACL support disabled"):
		on = false
	case statusOf(err) == http.StatusForbidden || statusOf(err) == http.StatusNotFound:
		on = true // ACLs on, and the service's own token is not valid for this
	default:
		if known != nil {
			return *known, nil // keep the last answer while Nomad is away
		}
		return false, fmt.Errorf("cannot tell whether Nomad's ACLs are on: %w", err)
	}
	n.mu.Lock()
	n.aclsOn, n.aclRead = &on, time.Now()
	n.mu.Unlock()
	return on, nil
}

// resolve asks Nomad what token may see.
func (n *NomadAccess) resolve(ctx context.Context, token string) (Access, error) {
	q := func(ns string, perPage int32) *nomadapi.QueryOptions {
		return (&nomadapi.QueryOptions{AuthToken: token, Namespace: ns, PerPage: perPage}).WithContext(ctx)
	}
	self, _, err := n.nomad.ACLTokens().Self(q("", 0))
	if err != nil {
		if s := statusOf(err); s == http.StatusForbidden || s == http.StatusNotFound {
			return Access{}, ErrTokenRejected
		}
		return Access{}, fmt.Errorf("resolving the token with Nomad: %w", err)
	}
	if self.Type == "management" {
		return Access{All: true}, nil
	}
	namespaces, _, err := n.nomad.Namespaces().List(q("", 0))
	if err != nil {
		return Access{}, fmt.Errorf("listing the token's Nomad namespaces: %w", err)
	}
	access := Access{Namespaces: map[string]bool{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, len(namespaces))
	sem := make(chan struct{}, probeParallel)
	for i, ns := range namespaces {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			ok, err := allowed(n.nomad.Jobs().List(q(ns.Name, 1)))
			if err != nil {
				errs[i] = fmt.Errorf("checking list-jobs in namespace %s: %w", ns.Name, err)
			}
			if ok {
				mu.Lock()
				access.Namespaces[ns.Name] = true
				mu.Unlock()
			}
		}()
	}
	access.Nodes, err = allowed(n.nomad.Nodes().List(q("", 1)))
	wg.Wait()
	if err := errors.Join(append(errs, err)...); err != nil {
		return Access{}, err
	}
	return access, nil
}

// allowed turns a listing's outcome into whether Nomad allowed it: a 403
// is a no, any other error is an error.
func allowed[T any](_ T, _ *nomadapi.QueryMeta, err error) (bool, error) {
	switch {
	case err == nil:
		return true, nil
	case statusOf(err) == http.StatusForbidden:
		return false, nil
	default:
		return false, err
	}
}

// statusOf is the HTTP status of a Nomad API error (0 when none).
func statusOf(err error) int {
	var ure nomadapi.UnexpectedResponseError
	if errors.As(err, &ure) && ure.HasStatusCode() {
		return ure.StatusCode()
	}
	return 0
}
