package ranking

import (
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"
)

func group(cpu int, devices ...*nomadapi.RequestedDevice) *nomadapi.TaskGroup {
	c := cpu
	return nomadapi.NewTaskGroup("g", 1).AddTask(&nomadapi.Task{Name: "t", Resources: &nomadapi.Resources{CPU: &c, Devices: devices}})
}

func device(name string, count uint64) *nomadapi.RequestedDevice {
	return &nomadapi.RequestedDevice{Name: name, Count: &count}
}

func TestAffinityNamesTheGroupsClass(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tg     *nomadapi.TaskGroup
		target string
	}{
		{"quarter share, 100 MHz", group(100, device("nvidia/gpu-share", 25)), "${meta.gpushare.rank.s25-c1}"},
		{"share without vendor", group(1500, device("gpu-share", 50)), "${meta.gpushare.rank.s50-c2}"},
		{"one whole GPU, 3 GHz", group(3000, device("nvidia/gpu", 1)), "${meta.gpushare.rank.w1-c4}"},
		{"two whole GPUs of a model", group(200, device("nvidia/gpu/NVIDIA H100", 2)), "${meta.gpushare.rank.w2-c1}"},
		{"CPU only", group(3000), "${meta.gpushare.rank.cpu-c4}"},
		{"another vendor's GPU", group(100, device("amd/gpu", 1)), "${meta.gpushare.rank.cpu-c1}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := Affinity(tc.tg)
			if err != nil {
				t.Fatal(err)
			}
			if a == nil || a.LTarget != tc.target || a.RTarget != "1" || a.Operand != "=" || *a.Weight != AffinityWeight {
				t.Fatalf("affinity %+v, want %s = 1 weight %d", a, tc.target, AffinityWeight)
			}
		})
	}
}

func TestClassRefusesMixedAsks(t *testing.T) {
	_, err := Class(group(100, device("nvidia/gpu", 1), device("nvidia/gpu-share", 10)))
	if err == nil {
		t.Fatal("a group asking for a whole GPU and shares got a class")
	}
}
