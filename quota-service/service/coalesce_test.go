package service

import (
	"testing"
	"time"
)

// TestCoalesceWait: a cycle woken by events gathers more of them until
// coalesceWindow after the first; events that waited out a cycle in
// flight start the next one at once.
func TestCoalesceWait(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	tests := []struct {
		name  string
		burst time.Time
		want  time.Duration
	}{
		{"first event unknown (a quota change, a timer)", time.Time{}, coalesceWindow},
		{"the event just came", now, coalesceWindow},
		{"the burst began 40 ms ago", now.Add(-40 * time.Millisecond), coalesceWindow - 40*time.Millisecond},
		{"the events waited for the cycle in flight", now.Add(-600 * time.Millisecond), 0},
	}
	for _, tt := range tests {
		if got := coalesceWait(tt.burst, now); got != tt.want {
			t.Errorf("%s: wait %s, want %s", tt.name, got, tt.want)
		}
	}
}
