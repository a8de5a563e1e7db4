package fairshare

import (
	"slices"
	"testing"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

func TestDeservedNested(t *testing.T) {
	g := cluster.GPUs
	type proj struct {
		name       string
		dept       int32
		guaranteed cluster.Shares
		weight     int64
		noOverQ    bool
		demand     cluster.Shares
	}
	tests := []struct {
		name     string
		capacity cluster.Shares
		depts    []cluster.Project
		projects []proj
		want     []cluster.Shares
	}{{
		name:     "a department's unused guarantee goes to its other projects first",
		capacity: g(8),
		depts:    []cluster.Project{{Name: "a", Guaranteed: g(6)}, {Name: "b", Guaranteed: g(2)}},
		projects: []proj{{"p1", 0, g(2), 1, false, g(8)}, {"p2", 0, g(2), 1, false, 0}, {"p3", 1, g(2), 1, false, g(8)}},
		want:     []cluster.Shares{g(6), 0, g(2)},
	}, {
		name:     "surplus across departments by their weights, then within by the projects'",
		capacity: g(8),
		depts:    []cluster.Project{{Name: "a", OverQuotaWeight: 3}, {Name: "b"}},
		projects: []proj{{"p1", 0, 0, 1, false, g(8)}, {"p2", 0, 0, 1, false, g(8)}, {"p3", 1, 0, 5, false, g(8)}},
		want:     []cluster.Shares{g(3), g(3), g(2)},
	}, {
		name:     "a project on its own stands beside the departments",
		capacity: g(9),
		depts:    []cluster.Project{{Name: "a", Guaranteed: g(2)}},
		projects: []proj{{"p1", 0, g(1), 1, false, g(9)}, {"p2", 0, g(1), 1, false, g(9)}, {"solo", -1, g(1), 1, false, g(9)}},
		want:     []cluster.Shares{250, 250, g(4)},
	}, {
		name:     "a weight-0 project claims only its guarantee for its department",
		capacity: g(10),
		depts:    []cluster.Project{{Name: "a", Guaranteed: g(4)}},
		projects: []proj{{"p1", 0, g(1), 0, true, g(5)}, {"p2", 0, g(1), 1, false, g(1)}, {"solo", -1, 0, 1, false, g(3)}},
		want:     []cluster.Shares{g(1), g(1), g(3)},
	}, {
		name:     "a department's limit caps its projects together",
		capacity: g(10),
		depts:    []cluster.Project{{Name: "a", Limit: g(3), HasLimit: true}},
		projects: []proj{{"p1", 0, 0, 1, false, g(10)}, {"p2", 0, 0, 1, false, g(10)}, {"solo", -1, 0, 1, false, g(10)}},
		want:     []cluster.Shares{150, 150, g(7)},
	}, {
		name:     "a department with no demand leaves its guarantee to others",
		capacity: g(4),
		depts:    []cluster.Project{{Name: "a", Guaranteed: g(4)}, {Name: "b"}},
		projects: []proj{{"p1", 0, g(2), 1, false, 0}, {"p3", 1, 0, 1, false, g(4)}},
		want:     []cluster.Shares{0, g(4)},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			projects := make([]cluster.Project, len(tt.projects))
			of := make([]int32, len(tt.projects))
			demand := make([]cluster.Shares, len(tt.projects))
			for i, p := range tt.projects {
				projects[i] = cluster.Project{Name: p.name, Guaranteed: p.guaranteed, OverQuotaWeight: p.weight, NoOverQuota: p.noOverQ}
				of[i], demand[i] = p.dept, p.demand
			}
			got := DeservedNested(tt.capacity, projects, tt.depts, of, demand)
			if !slices.Equal(got, tt.want) {
				t.Errorf("deserved = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestDeservedNestedWithoutDepartmentsIsFlat(t *testing.T) {
	projects := []cluster.Project{{Name: "a", Guaranteed: 150, OverQuotaWeight: 2}, {Name: "b", Priority: 1}, {Name: "c", Guaranteed: 100}}
	demand := []cluster.Shares{500, 300, 100}
	flat := Deserved(700, projects, demand)
	nested := DeservedNested(700, projects, nil, []int32{-1, -1, -1}, demand)
	if !slices.Equal(flat, nested) {
		t.Errorf("nested %v, flat %v", nested, flat)
	}
}
