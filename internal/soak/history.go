package soak

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// History is the soak's event log: every driver action, fault, service
// action seen in Consul's history and violation, in the order they were
// noted. It keeps the last keep lines; Around returns the lines near a
// time for a violation's report.
type History struct {
	mu    sync.Mutex
	start time.Time
	keep  int
	lines []event
	out   io.Writer
}

type event struct {
	at   time.Time
	what string
}

func newHistory(keep int, out io.Writer) *History {
	return &History{start: time.Now(), keep: keep, out: out}
}

// Add notes one event.
func (h *History) Add(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := event{at: time.Now(), what: fmt.Sprintf(format, args...)}
	h.lines = append(h.lines, e)
	if len(h.lines) > h.keep {
		h.lines = append(h.lines[:0:0], h.lines[len(h.lines)-h.keep:]...)
	}
	if h.out != nil {
		fmt.Fprintln(h.out, h.format(e))
	}
}

func (h *History) format(e event) string {
	return fmt.Sprintf("%7.2fs %s %s", e.at.Sub(h.start).Seconds(), e.at.UTC().Format("15:04:05.000"), e.what)
}

// Print writes s to the history's output without keeping it (a report
// of what the history holds already).
func (h *History) Print(s string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.out != nil {
		fmt.Fprint(h.out, s)
	}
}

// Around returns the events within window either side of t, one a line.
func (h *History) Around(t time.Time, window time.Duration) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b strings.Builder
	for _, e := range h.lines {
		if e.at.After(t.Add(-window)) && e.at.Before(t.Add(window)) {
			b.WriteString(h.format(e))
			b.WriteByte('\n')
		}
	}
	return b.String()
}
