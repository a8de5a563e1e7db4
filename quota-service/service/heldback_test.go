package service

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// TestHeldBackActionsAreWarnedOf: an action held back for the same reason
// in every cycle for a minute is warned of once; one that stops being
// held back for a cycle starts again, and a reason that changes every
// cycle (a hold counting down) is never warned of.
func TestHeldBackActionsAreWarnedOf(t *testing.T) {
	const stuck = "shrink team-b/j014/g1: not the instance Nomad stops first"
	every := func(why string) func(int) []string { return func(int) []string { return []string{why} } }
	tests := []struct {
		name  string
		steps func(cycle int) []string // what is held back in each 10 s cycle
		want  int                      // warnings over 13 cycles (2 minutes)
	}{
		{"held back every cycle", every(stuck), 1},
		{"a cycle without it starts again", func(c int) []string {
			if c == 5 || c == 10 {
				return nil
			}
			return []string{stuck}
		}, 0},
		{"a reason that changes every cycle", func(c int) []string {
			return []string{"resume team-c/j025: suspended only " + time.Duration(c).String() + " ago"}
		}, 0},
		{"nothing held back", func(int) []string { return nil }, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			s := &Service{log: hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Info})}
			start := time.Unix(1_000, 0)
			for c := range 13 {
				s.noteHeldBack(tt.steps(c), start.Add(time.Duration(c)*10*time.Second))
			}
			if got := strings.Count(out.String(), "held back in every cycle"); got != tt.want {
				t.Errorf("%d warnings, want %d:\n%s", got, tt.want, out.String())
			}
		})
	}
}
