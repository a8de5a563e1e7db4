package cluster

import (
	"reflect"
	"testing"
)

// fullSnapshot is a snapshot with every field of every element set.
func fullSnapshot() *Snapshot {
	ask := Ask{CPUMilli: 1, MemoryMiB: 2, WholeGPUs: 3, Shares: 4, Models: []string{"H100"}}
	return &Snapshot{
		Nodes: []Node{{Name: "n", CPUMilli: 1, MemoryMiB: 2, Unavailable: "u",
			GPUs: []GPU{{ID: "g", Model: "H100", MemoryMiB: 3, Mode: ModeShared, Shares: 4, Unavailable: "u"}}}},
		Allocations: []Allocation{{ID: "a", Project: "p", Job: "j", Group: "g", Priority: 1, Preemptible: true,
			System: true, NeverVictim: "v", Ask: ask, Node: "n", GPUs: []int{0}, Start: 2, Gang: true, MinCount: 3,
			InMinRuntime: true, Movable: true, Instance: 4}},
		Pending: []Pending{{Project: "p", Job: "j", Group: "g", Priority: 1, Preemptible: true, Ask: ask, Count: 2,
			Submit: 3, Suspended: true, Nodes: []string{"n"}, NodesReason: "r", Gang: true, MinCount: 4, Shrunk: true}},
		Projects: []Project{{Name: "p", Guaranteed: 1, Limit: 2, HasLimit: true, Priority: 3, OverQuotaWeight: 4,
			NoOverQuota: true, SurplusFactor: 0.5, Department: "d"}},
		Departments: []Project{{Name: "d", Guaranteed: 1}},
	}
}

// TestSnapshotEqualReadsEveryField: two snapshots built alike are Equal,
// and one that differs from them in any field of any element, or in the
// length of any list, is not. A field added to the model and not to Equal
// fails here.
func TestSnapshotEqualReadsEveryField(t *testing.T) {
	if !fullSnapshot().Equal(fullSnapshot()) {
		t.Fatal("two snapshots built alike are not Equal")
	}
	var leaves []leaf
	walkLeaves(reflect.ValueOf(fullSnapshot()).Elem(), "Snapshot", nil, &leaves)
	if len(leaves) < 60 {
		t.Fatalf("only %d fields walked", len(leaves))
	}
	for _, l := range leaves {
		s := fullSnapshot()
		v := reflect.ValueOf(s).Elem()
		for _, i := range l.path {
			if v.Kind() == reflect.Struct {
				v = v.Field(i)
			} else {
				v = v.Index(i)
			}
		}
		change(t, v, l.name)
		if s.Equal(fullSnapshot()) || fullSnapshot().Equal(s) {
			t.Errorf("a snapshot that differs in %s is Equal", l.name)
		}
	}
	empty := fullSnapshot()
	empty.Pending[0].Nodes = []string{}
	none := fullSnapshot()
	none.Pending[0].Nodes = nil
	if empty.Equal(none) {
		t.Error("a pending workload that may run nowhere is Equal to one that may run anywhere")
	}
}

// leaf is one field (or one list's length) of the model, by its path of
// field and element indexes.
type leaf struct {
	name string
	path []int
}

func walkLeaves(v reflect.Value, name string, path []int, out *[]leaf) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			walkLeaves(v.Field(i), name+"."+v.Type().Field(i).Name, append(append([]int(nil), path...), i), out)
		}
	case reflect.Slice:
		*out = append(*out, leaf{name + " (length)", path})
		if v.Len() > 0 && v.Type().Elem().Kind() == reflect.Struct {
			walkLeaves(v.Index(0), name+"[0]", append(append([]int(nil), path...), 0), out)
		}
	default:
		*out = append(*out, leaf{name, path})
	}
}

// change makes v differ: a list gets one more element, anything else
// another value.
func change(t *testing.T, v reflect.Value, name string) {
	switch v.Kind() {
	case reflect.Slice:
		v.Set(reflect.Append(v, reflect.Zero(v.Type().Elem())))
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Int, reflect.Int64, reflect.Int32:
		v.SetInt(v.Int() + 1)
	case reflect.Uint8, reflect.Uint32, reflect.Uint64:
		v.SetUint(v.Uint() + 1)
	case reflect.Float64:
		v.SetFloat(v.Float() + 1)
	default:
		t.Fatalf("%s: no way to change a %s", name, v.Kind())
	}
}

// BenchmarkSnapshotEqual compares two snapshots of 5,000 nodes and 100,000
// allocations built alike (no string shared between them: the slowest
// case), as the quota service does each cycle before it plans.
func BenchmarkSnapshotEqual(b *testing.B) {
	x, y := Synthetic(ScaleSpec), Synthetic(ScaleSpec)
	for b.Loop() {
		if !x.Equal(y) {
			b.Fatal("snapshots built alike differ")
		}
	}
}
