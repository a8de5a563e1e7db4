package nomadwatch

import (
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/quota"
	nomadapi "github.com/hashicorp/nomad/api"
)

// TestAssembleMinRuntime: an allocation younger than its project's
// min_runtime is marked; an older one is not; job meta may shorten the
// minimum but not lengthen it, and a bad value is a warning.
func TestAssembleMinRuntime(t *testing.T) {
	now := time.Unix(10_000, 0)
	at := func(id, job string, age time.Duration) *nomadapi.AllocationListStub {
		al := alloc(id, "a", job, "gpu", map[string]string{"young": "GPU-a", "old": "GPU-b", "short": "GPU-a", "bad": "GPU-b"}[id])
		al.CreateTime = now.Add(-age).UnixNano()
		return al
	}
	for _, tc := range []struct {
		name  string
		al    *nomadapi.AllocationListStub
		meta  map[string]string
		young bool
		warn  string
	}{
		{name: "young", al: at("young", "j", 5*time.Minute), young: true},
		{name: "old", al: at("old", "j", 20*time.Minute)},
		{name: "job meta shortens it", al: at("short", "j", 5*time.Minute), meta: map[string]string{MetaMinRuntime: "1m"}},
		{name: "job meta never lengthens it", al: at("old", "j", 20*time.Minute), meta: map[string]string{MetaMinRuntime: "1h"}},
		{name: "bad job meta: the project's holds", al: at("bad", "j", 5*time.Minute), meta: map[string]string{MetaMinRuntime: "soon"}, young: true,
			warn: `meta gpushare.min_runtime = "soon" is not a duration`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := Inputs{Nodes: []*nomadapi.NodeListStub{node()}, Allocations: []*nomadapi.AllocationListStub{tc.al},
				Jobs:     []*nomadapi.JobListStub{jobStub("a", "j", 0, false, tc.meta)},
				Settings: []quota.Settings{{Project: "a", Namespace: "a", OverQuotaWeight: 1, MinRuntime: 10 * time.Minute}}, Now: now}
			v := Assemble(in)
			if len(v.Snapshot.Allocations) != 1 || v.Snapshot.Allocations[0].InMinRuntime != tc.young {
				t.Errorf("allocations %+v: want InMinRuntime %v", v.Snapshot.Allocations, tc.young)
			}
			if got := strings.Join(v.Warnings, "\n"); tc.warn != "" && !strings.Contains(got, tc.warn) || tc.warn == "" && got != "" {
				t.Errorf("warnings %q, want %q", got, tc.warn)
			}
		})
	}
}

// TestAssembleMovable: a job with meta gpushare.movable = "true" is
// movable once its allocation has run the move cooldown; before, or
// without the meta, it is not.
func TestAssembleMovable(t *testing.T) {
	now := time.Unix(10_000, 0)
	for _, tc := range []struct {
		name    string
		age     time.Duration
		meta    map[string]string
		movable bool
	}{
		{name: "opted in, past the cooldown", age: 20 * time.Minute, meta: map[string]string{MetaMovable: "true"}, movable: true},
		{name: "opted in, within the cooldown", age: 5 * time.Minute, meta: map[string]string{MetaMovable: "TRUE"}},
		{name: "not opted in", age: 20 * time.Minute},
		{name: "anything but true", age: 20 * time.Minute, meta: map[string]string{MetaMovable: "yes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			al := alloc("m", "a", "j", "gpu", "GPU-a")
			al.CreateTime = now.Add(-tc.age).UnixNano()
			in := Inputs{Nodes: []*nomadapi.NodeListStub{node()}, Allocations: []*nomadapi.AllocationListStub{al},
				Jobs:     []*nomadapi.JobListStub{jobStub("a", "j", 0, false, tc.meta)},
				Settings: []quota.Settings{{Project: "a", Namespace: "a", OverQuotaWeight: 1}}, Now: now, MoveCooldown: 10 * time.Minute}
			v := Assemble(in)
			if len(v.Snapshot.Allocations) != 1 || v.Snapshot.Allocations[0].Movable != tc.movable {
				t.Errorf("allocations %+v: want Movable %v", v.Snapshot.Allocations, tc.movable)
			}
		})
	}
}
