package quota

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		project string
		doc     string
		want    Settings
		field   string // want a FieldError on this field ("" with wantErr: document-level)
		wantErr bool
	}{
		{name: "minimal", project: "ml", doc: `{"guaranteed": 2}`,
			want: Settings{Project: "ml", Guaranteed: 200, OverQuotaWeight: 1, Namespace: "ml"}},
		{name: "fractions and all fields", project: "ml",
			doc:  `{"guaranteed": 1.5, "limit": 3.25, "priority": -4, "over_quota_weight": 3, "mapping": {"namespace": "ml-ns", "job_meta_key": "project"}}`,
			want: Settings{Project: "ml", Guaranteed: 150, Limit: 325, HasLimit: true, Priority: -4, OverQuotaWeight: 3, Namespace: "ml-ns", JobMetaKey: "project"}},
		{name: "zero guarantee", project: "p", doc: `{"guaranteed": 0, "limit": 0}`,
			want: Settings{Project: "p", HasLimit: true, OverQuotaWeight: 1, Namespace: "p"}},
		{name: "missing guaranteed", project: "p", doc: `{"priority": 1}`, field: "guaranteed", wantErr: true},
		{name: "negative guaranteed", project: "p", doc: `{"guaranteed": -1}`, field: "guaranteed", wantErr: true},
		{name: "three decimals", project: "p", doc: `{"guaranteed": 0.125}`, field: "guaranteed", wantErr: true},
		{name: "exponent", project: "p", doc: `{"guaranteed": 1e2}`, field: "guaranteed", wantErr: true},
		{name: "string guaranteed", project: "p", doc: `{"guaranteed": "lots"}`, field: "guaranteed", wantErr: true},
		{name: "limit below guarantee", project: "p", doc: `{"guaranteed": 2, "limit": 1}`, field: "limit", wantErr: true},
		{name: "fractional priority", project: "p", doc: `{"guaranteed": 2, "priority": 1.5}`, field: "priority", wantErr: true},
		{name: "zero weight: no share of the surplus", project: "p", doc: `{"guaranteed": 2, "over_quota_weight": 0}`,
			want: Settings{Project: "p", Guaranteed: 200, Namespace: "p"}},
		{name: "negative weight", project: "p", doc: `{"guaranteed": 2, "over_quota_weight": -1}`, field: "over_quota_weight", wantErr: true},
		{name: "unknown field", project: "p", doc: `{"guaranteed": 2, "guaranted": 3}`, field: "guaranted", wantErr: true},
		{name: "unknown mapping field", project: "p", doc: `{"guaranteed": 2, "mapping": {"ns": "x"}}`, field: "ns", wantErr: true},
		{name: "bad namespace", project: "p", doc: `{"guaranteed": 2, "mapping": {"namespace": "a b"}}`, field: "mapping.namespace", wantErr: true},
		{name: "empty meta key", project: "p", doc: `{"guaranteed": 2, "mapping": {"job_meta_key": ""}}`, field: "mapping.job_meta_key", wantErr: true},
		{name: "mapping wrong type", project: "p", doc: `{"guaranteed": 2, "mapping": "ns"}`, field: "mapping", wantErr: true},
		{name: "not json", project: "p", doc: `guaranteed: 2`, wantErr: true},
		{name: "empty", project: "p", doc: ``, wantErr: true},
		{name: "trailing data", project: "p", doc: `{"guaranteed": 2} {}`, wantErr: true},
		{name: "array", project: "p", doc: `[1]`, wantErr: true},
		{name: "bad project name", project: "a/b", doc: `{"guaranteed": 2}`, wantErr: true},
		{name: "minimum runtime", project: "p", doc: `{"guaranteed": 2, "min_runtime": "10m"}`,
			want: Settings{Project: "p", Guaranteed: 200, OverQuotaWeight: 1, Namespace: "p", MinRuntime: 10 * time.Minute}},
		{name: "minimum runtime not a duration", project: "p", doc: `{"guaranteed": 2, "min_runtime": "ten minutes"}`, field: "min_runtime", wantErr: true},
		{name: "minimum runtime a number", project: "p", doc: `{"guaranteed": 2, "min_runtime": 600}`, field: "min_runtime", wantErr: true},
		{name: "minimum runtime too long", project: "p", doc: `{"guaranteed": 2, "min_runtime": "25h"}`, field: "min_runtime", wantErr: true},
		{name: "minimum runtime negative", project: "p", doc: `{"guaranteed": 2, "min_runtime": "-1m"}`, field: "min_runtime", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.project, []byte(tt.doc))
			if !tt.wantErr {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				if got != tt.want {
					t.Fatalf("Parse = %+v, want %+v", got, tt.want)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Parse error = %v, want a *FieldError", err)
			}
			if fe.Field != tt.field {
				t.Fatalf("error field = %q, want %q (%v)", fe.Field, tt.field, err)
			}
			if fe.Fix == "" || !strings.Contains(err.Error(), "fix:") {
				t.Fatalf("error %q does not say how to fix it", err)
			}
		})
	}
}

func TestModel(t *testing.T) {
	s, err := Parse("ml", []byte(`{"guaranteed": 1.5, "limit": 2, "priority": 3, "over_quota_weight": 2}`))
	if err != nil {
		t.Fatal(err)
	}
	want := cluster.Project{Name: "ml", Guaranteed: 150, Limit: 200, HasLimit: true, Priority: 3, OverQuotaWeight: 2}
	if got := s.Model(); got != want {
		t.Fatalf("Model = %+v, want %+v", got, want)
	}
	s, err = Parse("z", []byte(`{"guaranteed": 1, "over_quota_weight": 0}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Model(); !got.NoOverQuota || got.Weight() != 0 {
		t.Fatalf("Model of weight 0 = %+v (weight %d), want NoOverQuota and weight 0", got, got.Weight())
	}
}

func FuzzParse(f *testing.F) {
	for _, seed := range []string{`{"guaranteed": 2}`, `{"guaranteed": 1.5, "limit": 3, "priority": 1, "over_quota_weight": 2, "mapping": {"namespace": "a", "job_meta_key": "k"}}`, `{"guaranteed": -1}`, `[`, `{"mapping": null}`, `{"guaranteed": 1e400}`, `{"guaranteed": 1, "department": "research"}`} {
		f.Add("p", []byte(seed))
	}
	f.Fuzz(func(t *testing.T, project string, data []byte) {
		s, err := Parse(project, data)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a *FieldError", err)
			}
			return
		}
		if s.Guaranteed < 0 || (s.HasLimit && s.Limit < s.Guaranteed) || s.OverQuotaWeight < 0 || s.Namespace == "" || (s.Department != "" && !projectRE.MatchString(s.Department)) {
			t.Fatalf("accepted invalid settings %+v from %q", s, data)
		}
	})
}
