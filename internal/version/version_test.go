package version

import (
	"strings"
	"testing"
)

func TestRequested(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want bool
	}{
		{"no arguments", nil, false},
		{"single dash", []string{"-version"}, true},
		{"double dash", []string{"--version"}, true},
		{"with other arguments", []string{"-version", "-debug"}, false},
		{"another flag", []string{"-debug"}, false},
		{"a value", []string{"version"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Requested(tt.args); got != tt.want {
				t.Errorf("Requested(%q) = %t, want %t", tt.args, got, tt.want)
			}
		})
	}
}

func TestString(t *testing.T) {
	tests := []struct {
		name, version, commit, want string
	}{
		{"default", "dev", "", "gpushare-quota dev go"},
		{"release", "0.2.0", "", "gpushare-quota 0.2.0 go"},
		{"release with commit", "0.2.0", "abc1234", "gpushare-quota 0.2.0 (abc1234) go"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func(v, c string) { Version, Commit = v, c }(Version, Commit)
			Version, Commit = tt.version, tt.commit
			if got := String("gpushare-quota"); !strings.HasPrefix(got, tt.want) {
				t.Errorf("String = %q, want it to start with %q", got, tt.want)
			}
		})
	}
}
