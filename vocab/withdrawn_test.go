package vocab

import "testing"

// TestWithdrawnContract: every withdrawal the plugin publishes is
// recognised, with the exact texts earlier plugins wrote (a quota service
// reads old and new plugins alike), and no other health description is.
func TestWithdrawnContract(t *testing.T) {
	tests := []struct {
		desc string
		want bool
	}{
		{WithdrawnWaiting(), true},
		{WithdrawnSettling("share"), true},
		{WithdrawnConflict(), true},
		{WithdrawnSwitching("whole", "settling"), true},
		// As earlier plugins wrote them.
		{"gpushare: waiting to read GPU usage from the Nomad API", true},
		{"gpushare: settling before first publication in whole mode", true},
		{"gpushare: GPU is held both whole and shared; withdrawn until one side ends", true},
		{"gpushare: switching to share mode (withdrawing)", true},
		// Reasons that make a GPU unavailable.
		{"gpushare: nvml: GPU is lost", false},
		{"gpushare: critical Xid 79 at 10:00:00; unhealthy until the plugin restarts", false},
		{"gpushare: not offered while the plugin cannot see every allocation on this node: namespace x", false},
		{"gpushare: GPU is in whole mode", false},
		{"switching to share mode", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := IsWithdrawn(tt.desc); got != tt.want {
			t.Errorf("IsWithdrawn(%q) = %v, want %v", tt.desc, got, tt.want)
		}
	}
	for _, pair := range [][2]string{
		{WithdrawnWaiting(), "gpushare: waiting to read GPU usage from the Nomad API"},
		{WithdrawnSettling("whole"), "gpushare: settling before first publication in whole mode"},
		{WithdrawnConflict(), "gpushare: GPU is held both whole and shared; withdrawn until one side ends"},
		{WithdrawnSwitching("share", "withdrawing"), "gpushare: switching to share mode (withdrawing)"},
	} {
		if pair[0] != pair[1] {
			t.Errorf("withdrawal text %q, earlier plugins wrote %q", pair[0], pair[1])
		}
	}
}
