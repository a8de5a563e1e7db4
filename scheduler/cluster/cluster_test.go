package cluster

import "testing"

func TestParseShares(t *testing.T) {
	tests := []struct {
		in      string
		want    Shares
		wantErr bool
	}{
		{"2", 200, false},
		{"0.5", 50, false},
		{"1.25", 125, false},
		{"0.05", 5, false},
		{"-1", -100, false},
		{"1.255", 0, true},
		{"", 0, true},
		{"1.", 0, true},
		{".5", 0, true},
		{"x", 0, true},
		{"1e3", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseShares(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseShares(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
	if s := Shares(125).String(); s != "1.25" {
		t.Errorf("String = %q, want 1.25", s)
	}
}
