package nomadwatch

import (
	"strings"
	"testing"

	"github.com/gpushare/nomad-gpushare/vocab"
	nomadapi "github.com/hashicorp/nomad/api"
)

// TestDeviceGroupKeepsInstanceIDs checks that the cache's short form of a
// device group's instance IDs gives back exactly the IDs Nomad showed, in
// order, so that ${device.ids} constraints read the same, and that a share
// group takes one run per GPU.
func TestDeviceGroupKeepsInstanceIDs(t *testing.T) {
	shares := func(perGPU int, uuids ...string) []string {
		var out []string
		for _, u := range uuids {
			for k := range perGPU {
				out = append(out, vocab.ShareOf(u, k, perGPU))
			}
		}
		return out
	}
	tests := []struct {
		name string
		ids  []string
		runs int
	}{
		{name: "shares at 100 per GPU", ids: shares(100, "GPU-1", "GPU-2"), runs: 2},
		{name: "shares at 4 per GPU", ids: shares(4, "GPU-1", "GPU-2", "GPU-3"), runs: 3},
		{name: "whole GPUs", ids: []string{"GPU-b", "GPU-a"}, runs: 2},
		{name: "gaps, repeats and other plugins' IDs", ids: []string{"a-s05", "a-s07", "a-s08", "a-s08", "b-u01-s00", "b-u03-s01", "mig-1", "x-s1", "a-u25-s00", "a-u25-s01", "a-s02"}, runs: 9},
		{name: "empty", ids: nil, runs: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &nomadapi.NodeDeviceResource{Vendor: "other", Type: "gpu", Name: "g"}
			for _, id := range tt.ids {
				g.Instances = append(g.Instances, &nomadapi.NodeDevice{ID: id})
			}
			dg := newDeviceGroup(g)
			if got, want := dg.joinedIDs(), strings.Join(tt.ids, ","); got != want {
				t.Errorf("joined IDs %q, want %q", got, want)
			}
			if dg.instances != len(tt.ids) || len(dg.ids) != tt.runs {
				t.Errorf("%d instances in %d runs, want %d in %d", dg.instances, len(dg.ids), len(tt.ids), tt.runs)
			}
			if dg.res.Instances != nil || len(g.Instances) != len(tt.ids) {
				t.Error("the group kept its instance list, or the node's lost its own")
			}
		})
	}
}
