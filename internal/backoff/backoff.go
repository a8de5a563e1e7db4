// Package backoff is the one retry delay of the project: after a failure
// the next try waits Min, then twice the last wait, up to Max, optionally
// with jitter; a success starts over. The plugin's watches of Nomad, the
// quota service's event stream and its quota folder watch all retry with
// it.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff computes the waits between failed tries. The zero value waits
// nothing; set Min and Max.
type Backoff struct {
	// Min is the first wait after a success (or from the start), Max the
	// longest wait.
	Min, Max time.Duration
	// Jitter, when set, draws each wait uniformly from [d/2, d] instead
	// of d, so that many clients do not retry in step.
	Jitter bool
	// last is the last wait before jitter, 0 after a success.
	last time.Duration
}

// Next returns the wait before the try after a failure: Min after a
// success, then twice the last wait, up to Max.
func (b *Backoff) Next() time.Duration {
	if b.last == 0 {
		b.last = b.Min
	} else {
		b.last = min(2*b.last, b.Max)
	}
	if b.Jitter {
		return b.last/2 + rand.N(b.last/2+1)
	}
	return b.last
}

// Reset starts over after a success: the next failure waits Min.
func (b *Backoff) Reset() { b.last = 0 }

// Waited tells b that the caller waited d before its next try for another
// reason (a fixed delay): a failure after it waits twice d, up to Max.
func (b *Backoff) Waited(d time.Duration) { b.last = d }

// Sleep waits d, or until ctx ends; it reports whether ctx is still live.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
