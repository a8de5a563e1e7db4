// Package leader elects one acting instance among several with a Consul
// lock, so that two quota services can run and only one acts.
//
// Run loops: it waits for the lock, runs the leader function with a context
// that is cancelled as soon as the lock is lost (session invalidated,
// Consul unreachable beyond the retries), then competes again. A new
// leader rebuilds everything from Nomad and Consul KV: nothing is carried
// over in memory.
//
// The lock's monitor may learn late that the lock is gone (a blocking
// query to an unreachable Consul can hang), so Held re-checks the lock with
// a consistent read; the service calls it before every action.
package leader

import (
	"context"
	"fmt"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
)

// Options tune the election.
type Options struct {
	// Key is the lock key, e.g. "gpushare/leader".
	Key string
	// Instance is written as the lock's value, naming the holder.
	Instance string
	// SessionTTL bounds how long a crashed leader keeps the lock
	// (default 10 s; Consul may take up to twice that).
	SessionTTL time.Duration
	// LockDelay is how long Consul keeps the lock from being taken after
	// an invalidated session (default 1 s).
	LockDelay time.Duration
	// RetryWait is the pause after an error (default 1 s).
	RetryWait time.Duration
}

// Run competes for the lock until ctx ends, calling lead while it holds it.
// lead must return soon after its context is cancelled.
func Run(ctx context.Context, client *consulapi.Client, opts Options, log hclog.Logger, lead func(ctx context.Context)) error {
	log = log.Named("leader")
	if opts.Key == "" {
		return fmt.Errorf("leader: no lock key; set the KV prefix")
	}
	ttl := opts.SessionTTL
	if ttl <= 0 {
		ttl = 10 * time.Second
	}
	delay := opts.LockDelay
	if delay <= 0 {
		delay = time.Second
	}
	retry := opts.RetryWait
	if retry <= 0 {
		retry = time.Second
	}
	ctxStop := make(chan struct{})
	go func() { <-ctx.Done(); close(ctxStop) }()
	for ctx.Err() == nil {
		lock, err := client.LockOpts(&consulapi.LockOptions{
			Key:   opts.Key,
			Value: []byte(opts.Instance),
			SessionOpts: &consulapi.SessionEntry{
				Name: "gpushare-quota " + opts.Instance, TTL: ttl.String(),
				LockDelay: delay, Behavior: consulapi.SessionBehaviorDelete,
			},
			MonitorRetries:   3,
			MonitorRetryTime: time.Second,
			LockWaitTime:     5 * time.Second,
		})
		if err != nil {
			return fmt.Errorf("leader: creating the lock on %s: %w", opts.Key, err)
		}
		lost, err := lock.Lock(ctxStop)
		if err != nil {
			log.Warn("cannot compete for leadership; retrying", "key", opts.Key, "error", err)
			select {
			case <-ctx.Done():
			case <-time.After(retry):
			}
			continue
		}
		if lost == nil {
			continue // ctx ended while waiting
		}
		log.Info("acquired leadership", "key", opts.Key, "instance", opts.Instance)
		lctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); lead(lctx) }()
		select {
		case <-lost:
			log.Warn("lost leadership", "key", opts.Key)
		case <-ctx.Done():
		case <-done:
		}
		cancel()
		<-done
		if err := lock.Unlock(); err != nil && err != consulapi.ErrLockNotHeld {
			log.Warn("releasing the lock failed; it expires with the session", "error", err)
		}
	}
	return nil
}

// Held checks, with a consistent read, that the lock at key is held by a
// session and names instance. The service calls it right before acting:
// the lock's own monitor may notice a lost session late (a blocking query
// to an unreachable Consul can hang), while Consul may already have given
// the lock to another instance. Instance names must be unique.
func Held(ctx context.Context, client *consulapi.Client, key, instance string) error {
	pair, _, err := client.KV().Get(key, (&consulapi.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("leader: verifying the lock on %s: %w", key, err)
	}
	switch {
	case pair == nil || pair.Session == "":
		return fmt.Errorf("leader: the lock on %s is not held", key)
	case string(pair.Value) != instance:
		return fmt.Errorf("leader: the lock on %s is held by %q, not %q", key, pair.Value, instance)
	}
	return nil
}
