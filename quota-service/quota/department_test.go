package quota

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

func TestParseDepartment(t *testing.T) {
	tests := []struct {
		name    string
		dept    string
		doc     string
		want    Department
		field   string // want a FieldError on this field ("" with wantErr: document-level)
		problem string // and its problem says this
		wantErr bool
	}{
		{name: "minimal", dept: "research", doc: `{"guaranteed": 8}`,
			want: Department{Name: "research", Guaranteed: 800, OverQuotaWeight: 1}},
		{name: "all fields", dept: "research", doc: `{"guaranteed": 4.5, "limit": 12, "priority": 3, "over_quota_weight": 0}`,
			want: Department{Name: "research", Guaranteed: 450, Limit: 1200, HasLimit: true, Priority: 3}},
		{name: "missing guaranteed", dept: "d", doc: `{"limit": 2}`, field: "guaranteed", wantErr: true},
		{name: "limit below guarantee", dept: "d", doc: `{"guaranteed": 4, "limit": 2}`, field: "limit", wantErr: true},
		{name: "three decimals", dept: "d", doc: `{"guaranteed": 0.125}`, field: "guaranteed", wantErr: true},
		{name: "negative weight", dept: "d", doc: `{"guaranteed": 1, "over_quota_weight": -1}`, field: "over_quota_weight", wantErr: true},
		{name: "a department naming a department", dept: "d", doc: `{"guaranteed": 1, "department": "org"}`,
			field: "department", problem: "departments do not nest", wantErr: true},
		{name: "a department naming a parent", dept: "d", doc: `{"guaranteed": 1, "parent": "org"}`,
			field: "parent", problem: "departments do not nest", wantErr: true},
		{name: "a project's field", dept: "d", doc: `{"guaranteed": 1, "min_runtime": "10m"}`, field: "min_runtime", problem: "unknown field", wantErr: true},
		{name: "mapping", dept: "d", doc: `{"guaranteed": 1, "mapping": {}}`, field: "mapping", problem: "unknown field", wantErr: true},
		{name: "wrong type", dept: "d", doc: `{"guaranteed": 1, "priority": "high"}`, field: "priority", wantErr: true},
		{name: "not json", dept: "d", doc: `guaranteed: 1`, wantErr: true},
		{name: "empty", dept: "d", doc: ``, wantErr: true},
		{name: "trailing data", dept: "d", doc: `{"guaranteed": 1} {}`, wantErr: true},
		{name: "nested key", dept: "org/d", doc: `{"guaranteed": 1}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseDepartment(tt.dept, []byte(tt.doc))
			if !tt.wantErr {
				if err != nil {
					t.Fatalf("ParseDepartment: %v", err)
				}
				if got != tt.want {
					t.Fatalf("ParseDepartment = %+v, want %+v", got, tt.want)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) || !fe.Department {
				t.Fatalf("error = %v, want a *FieldError of a department", err)
			}
			if fe.Field != tt.field || !strings.Contains(fe.Problem, tt.problem) {
				t.Fatalf("error field %q problem %q, want field %q saying %q (%v)", fe.Field, fe.Problem, tt.field, tt.problem, err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "department \""+tt.dept+"\"") || fe.Fix == "" || !strings.Contains(msg, "fix:") {
				t.Fatalf("error %q does not name the department and say how to fix it", msg)
			}
		})
	}
}

func TestParseProjectDepartment(t *testing.T) {
	s, err := Parse("ml", []byte(`{"guaranteed": 2, "department": "research"}`))
	if err != nil {
		t.Fatal(err)
	}
	if s.Department != "research" || s.Model().Department != "research" {
		t.Fatalf("settings %+v, model %+v: want department research", s, s.Model())
	}
	for _, doc := range []string{`{"guaranteed": 2, "department": ""}`, `{"guaranteed": 2, "department": "a/b"}`, `{"guaranteed": 2, "department": 3}`, `{"guaranteed": 2, "department": null}`} {
		_, err := Parse("ml", []byte(doc))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != "department" || fe.Fix == "" {
			t.Errorf("Parse(%s) = %v, want an error on field department with a fix", doc, err)
		}
	}
}

func TestDepartmentModel(t *testing.T) {
	d, err := ParseDepartment("research", []byte(`{"guaranteed": 4, "limit": 6, "priority": 2, "over_quota_weight": 3}`))
	if err != nil {
		t.Fatal(err)
	}
	want := cluster.Project{Name: "research", Guaranteed: 400, Limit: 600, HasLimit: true, Priority: 2, OverQuotaWeight: 3}
	if got := d.Model(); got != want {
		t.Fatalf("Model = %+v, want %+v", got, want)
	}
}

func FuzzParseDepartment(f *testing.F) {
	for _, seed := range []string{`{"guaranteed": 2}`, `{"guaranteed": 1.5, "limit": 3, "priority": 1, "over_quota_weight": 2}`, `{"guaranteed": 1, "department": "x"}`, `{"guaranteed": -1}`, `[`, `{"parent": null}`, `{"guaranteed": 1e400}`} {
		f.Add("d", []byte(seed))
	}
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		d, err := ParseDepartment(name, data)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) || !fe.Department {
				t.Fatalf("error %v is not a department's *FieldError", err)
			}
			return
		}
		if d.Name != name || d.Guaranteed < 0 || (d.HasLimit && d.Limit < d.Guaranteed) || d.OverQuotaWeight < 0 {
			t.Fatalf("accepted invalid department %+v from %q", d, data)
		}
		if m := d.Model(); m.Department != "" {
			t.Fatalf("department %q nests in %q", name, m.Department)
		}
	})
}
