package provider

import "testing"

func TestCLIName(t *testing.T) {
	tests := []struct {
		command, want string
	}{
		{"tofu", "tofu"},
		{"tofu-1.10.7", "tofu"},
		{"terraform", "terraform"},
		{"", "terraform"},
		{"go", "terraform"},
	}
	for _, tt := range tests {
		t.Run(tt.command, func(t *testing.T) {
			if got := cliName(tt.command); got != tt.want {
				t.Errorf("cliName(%q) = %q, want %q", tt.command, got, tt.want)
			}
		})
	}
}
