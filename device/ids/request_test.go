package ids

import (
	"testing"

	"github.com/hashicorp/nomad/api"
)

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

func TestParseRequestCount(t *testing.T) {
	three := uint64(3)
	tests := []struct {
		dev          api.RequestedDevice
		count        int
		whole, share bool
	}{
		{api.RequestedDevice{Name: "nvidia/gpu"}, 1, true, false},
		{api.RequestedDevice{Name: "gpu", Count: &three}, 3, true, false},
		{api.RequestedDevice{Name: "nvidia/gpu-share/NVIDIA H100-ab", Count: &three}, 3, false, true},
		{api.RequestedDevice{Name: "amd/gpu"}, 1, false, false},
		{api.RequestedDevice{Name: "nvidia/fpga"}, 1, false, false},
	}
	for _, tt := range tests {
		r := ParseRequest(&tt.dev)
		if r.Count != tt.count || r.Whole() != tt.whole || r.Share() != tt.share {
			t.Errorf("ParseRequest(%q) = %+v whole=%v share=%v, want count %d whole=%v share=%v", tt.dev.Name, r, r.Whole(), r.Share(), tt.count, tt.whole, tt.share)
		}
	}
}
