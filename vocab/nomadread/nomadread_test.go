package nomadread

import (
	"slices"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/gpushare/nomad-gpushare/vocab"
)

func TestHeldDevices(t *testing.T) {
	const a, b = "GPU-aaaa", "GPU-bbbb"
	res := &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
		"train": {Devices: []*api.AllocatedDeviceResource{
			{Vendor: vocab.Vendor, Type: vocab.TypeWhole, DeviceIDs: []string{b, a}},
			{Vendor: "amd", Type: vocab.TypeWhole, DeviceIDs: []string{"GPU-cccc"}},
		}},
		"sidecar": {Devices: []*api.AllocatedDeviceResource{
			{Vendor: vocab.Vendor, Type: vocab.TypeShare, DeviceIDs: []string{vocab.Share(b, 7), vocab.Share(a, 0), vocab.Share(a, 1)}},
			// A share ID given in the whole family is not ours to count.
			{Vendor: vocab.Vendor, Type: vocab.TypeWhole, DeviceIDs: []string{vocab.Share(b, 8)}},
		}},
		"idle": nil,
	}}
	h := HeldDevices(res)
	if !slices.Equal(h.Whole, []string{a, b}) {
		t.Errorf("Whole = %v, want [%s %s]", h.Whole, a, b)
	}
	if want := []vocab.HeldShares{{UUID: a, Units: 2}, {UUID: b, Units: 1}}; !slices.Equal(h.Shares, want) {
		t.Errorf("Shares = %v, want %v (sorted by UUID)", h.Shares, want)
	}
	if !HeldDevices(nil).Empty() {
		t.Error("nil resources hold something")
	}
}

// TestHeldDevicesCountsUnits: an allocation given instances of a plugin
// with 4 shares per GPU holds 25 units per instance.
func TestHeldDevicesCountsUnits(t *testing.T) {
	const a = "GPU-aaaa"
	res := &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
		"train": {Devices: []*api.AllocatedDeviceResource{
			{Vendor: vocab.Vendor, Type: vocab.TypeShare, DeviceIDs: []string{vocab.ShareOf(a, 0, 4), vocab.ShareOf(a, 3, 4)}},
		}},
	}}
	if got := HeldDevices(res).ShareUnits(a); got != 50 {
		t.Errorf("Shares[%s] = %d units, want 50 (two instances of 25)", a, got)
	}
}

func TestShareUnit(t *testing.T) {
	group := func(typ string, shares int64) *api.NodeDeviceResource {
		return &api.NodeDeviceResource{Vendor: vocab.Vendor, Type: typ, Attributes: map[string]*api.Attribute{vocab.SharesAttr: {IntVal: &shares}}}
	}
	tests := []struct {
		name string
		devs []*api.NodeDeviceResource
		want int
	}{
		{"default publication", []*api.NodeDeviceResource{group(vocab.TypeWhole, 0), group(vocab.TypeShare, 100)}, 1},
		{"4 per GPU", []*api.NodeDeviceResource{group(vocab.TypeShare, 4)}, 25},
		{"no share group", []*api.NodeDeviceResource{group(vocab.TypeWhole, 4)}, 1},
		{"invalid count", []*api.NodeDeviceResource{group(vocab.TypeShare, 30)}, 1},
		{"nothing", nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ShareUnit(tt.devs); got != tt.want {
				t.Errorf("ShareUnit = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestTaskLimitNearestMetaWins(t *testing.T) {
	str := func(s string) *string { return &s }
	job := &api.Job{Meta: map[string]string{vocab.LimitMetaKey: "0.9"}, TaskGroups: []*api.TaskGroup{
		{Name: str("g"), Meta: map[string]string{vocab.LimitMetaKey: "0.8"}, Tasks: []*api.Task{
			{Name: "t", Meta: map[string]string{vocab.LimitMetaKey: "0.7"}}, {Name: "u"}}},
		{Name: str("h"), Tasks: []*api.Task{{Name: "t"}}},
	}}
	for _, c := range []struct{ group, task, want, where string }{
		{"g", "t", "0.7", "task"}, {"g", "u", "0.8", "group"}, {"h", "t", "0.9", "job"},
	} {
		if v, w, ok := TaskLimit(job, c.group, c.task); !ok || v != c.want || w != c.where {
			t.Errorf("%s/%s: %q from %s, %v", c.group, c.task, v, w, ok)
		}
	}
	if _, _, ok := TaskLimit(&api.Job{}, "g", "t"); ok {
		t.Error("a job without the key has a limit")
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
