package vocab

import "testing"

func TestParseRequestName(t *testing.T) {
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
		if got := ParseRequestName(tt.name); got != tt.want {
			t.Errorf("ParseRequestName(%q) = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
