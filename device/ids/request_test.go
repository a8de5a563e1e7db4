package ids

import "testing"

func TestParseRequest(t *testing.T) {
	tests := []struct {
		name string
		want Request
	}{
		{"gpu", Request{Type: "gpu"}},
		{"nvidia/gpu-share", Request{Vendor: "nvidia", Type: "gpu-share"}},
		{"nvidia/gpu/NVIDIA H100 80GB HBM3", Request{Vendor: "nvidia", Type: "gpu", Name: "NVIDIA H100 80GB HBM3"}},
		{"nvidia/gpu-share/A/B", Request{Vendor: "nvidia", Type: "gpu-share", Name: "A/B"}},
	}
	for _, tt := range tests {
		if got := ParseRequest(tt.name); got != tt.want {
			t.Errorf("ParseRequest(%q) = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
