package alloctrack

import (
	"reflect"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/vocab"
	"github.com/hashicorp/nomad/api"
)

func TestTenantsOf(t *testing.T) {
	name := "g"
	job := &api.Job{Meta: map[string]string{vocab.LimitMetaKey: "0.5"}, TaskGroups: []*api.TaskGroup{{Name: &name,
		Tasks: []*api.Task{{Name: "nb", Meta: map[string]string{vocab.LimitMetaKey: "1.0"}}, {Name: "side"}}}}}
	a := &api.Allocation{ID: "a1", Namespace: "team-a", JobID: "j", TaskGroup: "g", Job: job, ClientStatus: "running", DesiredStatus: "run",
		CreateIndex: 20, CreateTime: 2e9, AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
			"nb":   {Devices: []*api.AllocatedDeviceResource{devs("gpu-share", "GPU-2-s01", "GPU-2-s00")}},
			"side": {Devices: []*api.AllocatedDeviceResource{devs("gpu", "GPU-3")}},
			"cpu":  {},
		}}}
	b := &api.Allocation{ID: "b1", Namespace: "default", JobID: "w", TaskGroup: "g", Job: &api.Job{}, ClientStatus: "running", DesiredStatus: "stop",
		CreateIndex: 10, CreateTime: 1e9, AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
			"main": {Devices: []*api.AllocatedDeviceResource{devs("gpu", "GPU-1")}}}}}
	done := alloc("c1", "complete", devs("gpu", "GPU-4"))

	got := tenantsOf([]*api.Allocation{a, b, done})
	want := []Tenant{
		{AllocID: "b1", Namespace: "default", Job: "w", Group: "g", Task: "main", Stopping: true, Created: time.Unix(1, 0), CreateIndex: 10, Whole: []string{"GPU-1"}},
		{AllocID: "a1", Namespace: "team-a", Job: "j", Group: "g", Task: "nb", Created: time.Unix(2, 0), CreateIndex: 20,
			ShareGPU: "GPU-2", ShareIDs: []string{"GPU-2-s00", "GPU-2-s01"}, Limit: "1.0", LimitFrom: "task"},
		{AllocID: "a1", Namespace: "team-a", Job: "j", Group: "g", Task: "side", Created: time.Unix(2, 0), CreateIndex: 20,
			Whole: []string{"GPU-3"}, Limit: "0.5", LimitFrom: "job"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%+v\nwant\n%+v", got, want)
	}
	if got[1].Key() != "a1/nb" || got[1].Shares() != 2 {
		t.Errorf("key %s shares %d", got[1].Key(), got[1].Shares())
	}
}
