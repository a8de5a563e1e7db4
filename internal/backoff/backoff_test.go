package backoff

import (
	"context"
	"testing"
	"time"
)

// TestNext: the waits double from Min up to Max; Reset starts over, and a
// wait the caller made for another reason counts as the last wait.
func TestNext(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		name string
		b    Backoff
		// steps: "f" a failure (Next), "r" a success (Reset), "w" the
		// caller waited 700 ms (Waited).
		steps string
		want  []time.Duration
	}{
		{"doubles up to Max", Backoff{Min: 250 * ms, Max: 1000 * ms}, "fffff", []time.Duration{250 * ms, 500 * ms, 1000 * ms, 1000 * ms, 1000 * ms}},
		{"reset starts over", Backoff{Min: 250 * ms, Max: 1000 * ms}, "ffrf", []time.Duration{250 * ms, 500 * ms, 250 * ms}},
		{"after a fixed wait", Backoff{Min: 250 * ms, Max: 5000 * ms}, "fwff", []time.Duration{250 * ms, 1400 * ms, 2800 * ms}},
		{"a fixed wait above Max", Backoff{Min: 250 * ms, Max: 1000 * ms}, "wf", []time.Duration{1000 * ms}},
		{"Min above Max", Backoff{Min: 2000 * ms, Max: 1000 * ms}, "ff", []time.Duration{2000 * ms, 1000 * ms}},
		{"zero waits nothing", Backoff{}, "ff", []time.Duration{0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []time.Duration
			for _, s := range tt.steps {
				switch s {
				case 'f':
					got = append(got, tt.b.Next())
				case 'r':
					tt.b.Reset()
				case 'w':
					tt.b.Waited(700 * ms)
				}
			}
			if len(got) != len(tt.want) {
				t.Fatalf("waits %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("waits %v, want %v", got, tt.want)
				}
			}
		})
	}
}

// TestJitter: a jittered wait lies in [d/2, d] of the wait without jitter.
func TestJitter(t *testing.T) {
	b := Backoff{Min: time.Second, Max: 8 * time.Second, Jitter: true}
	for i, d := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second} {
		if w := b.Next(); w < d/2 || w > d {
			t.Errorf("wait %d: %v, want within [%v, %v]", i, w, d/2, d)
		}
	}
}

// TestSleep: Sleep returns false at once on an ended context, and true
// after a wait of nothing on a live one.
func TestSleep(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	if !Sleep(ctx, 0) {
		t.Error("Sleep(live, 0) = false")
	}
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Error("Sleep(ended, 1h) = true")
	}
}
