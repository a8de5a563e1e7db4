package soak

import (
	"strings"
	"testing"
	"time"
)

func TestRSSBound(t *testing.T) {
	cases := []struct {
		warm, want int64
	}{
		{10 * mib, 74 * mib},   // small: baseline plus 64 MiB
		{64 * mib, 128 * mib},  // both the same
		{200 * mib, 400 * mib}, // large: twice the baseline
	}
	for _, tc := range cases {
		if got := rssBound(tc.warm); got != tc.want {
			t.Errorf("rssBound(%d MiB) = %d MiB, want %d MiB", tc.warm/mib, got/mib, tc.want/mib)
		}
	}
}

func TestRSSTrackerJudgesAfterWarmup(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type sample struct {
		after time.Duration
		rss   int64
		want  string // "" no violation
	}
	cases := []struct {
		name    string
		samples []sample
	}{
		{"a spike during warm-up is no violation", []sample{{0, 10 * mib, ""}, {time.Second, 500 * mib, ""}, {rssWarmup, 20 * mib, ""}, {rssWarmup + time.Second, 80 * mib, ""}}},
		{"within the bound", []sample{{0, 10 * mib, ""}, {rssWarmup, 20 * mib, ""}, {2 * rssWarmup, 84 * mib, ""}}},
		{"over the bound, once", []sample{{0, 10 * mib, ""}, {rssWarmup, 20 * mib, ""}, {2 * rssWarmup, 85 * mib, "over its bound 84.0 MiB"}, {3 * rssWarmup, 90 * mib, ""}}},
		{"large process may double", []sample{{0, 200 * mib, ""}, {rssWarmup, 200 * mib, ""}, {2 * rssWarmup, 400 * mib, ""}, {3 * rssWarmup, 401 * mib, "over its bound"}}},
	}
	for _, tc := range cases {
		tr := newRSSTracker()
		var peak int64
		for i, s := range tc.samples {
			got := tr.observe("service", 42, t0.Add(s.after), s.rss)
			peak = max(peak, s.rss)
			switch {
			case s.want == "" && got != "":
				t.Errorf("%s: sample %d: reported %q", tc.name, i, got)
			case s.want != "" && !strings.Contains(got, s.want):
				t.Errorf("%s: sample %d: got %q, want it to contain %q", tc.name, i, got, s.want)
			}
		}
		if got := tr.peakMiB("service"); got != float64(peak)/mib {
			t.Errorf("%s: peak %.1f MiB, want %.1f", tc.name, got, float64(peak)/mib)
		}
	}
}

func TestRSSTrackerForgetsExitedProcesses(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tr := newRSSTracker()
	tr.observe("plugin", 7, t0, 10*mib)
	tr.observe("plugin", 7, t0.Add(rssWarmup), 10*mib)
	tr.forget(map[string]bool{})
	// The PID reused by a new process: a new warm-up, no violation.
	if got := tr.observe("plugin", 7, t0.Add(2*rssWarmup), 300*mib); got != "" {
		t.Errorf("a new process under a reused PID was judged against the old baseline: %q", got)
	}
}

func TestParseVmRSS(t *testing.T) {
	cases := []struct {
		in   string
		want int64
		err  bool
	}{
		{"Name:\tx\nVmPeak:\t  100 kB\nVmRSS:\t   2048 kB\n", 2 * mib, false},
		{"Name:\tx\nState:\tZ (zombie)\n", 0, true},
		{"VmRSS:\t12 MB\n", 0, true},
	}
	for _, tc := range cases {
		got, err := parseVmRSS(strings.NewReader(tc.in))
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("parseVmRSS(%q) = %d, %v; want %d, error %t", tc.in, got, err, tc.want, tc.err)
		}
	}
}
