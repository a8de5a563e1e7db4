package provider

import (
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// sameQuota compares models attribute by attribute (types.Float64 holds
// a pointer).
func sameQuota(a, b quotaModel) bool {
	return a.Project.Equal(b.Project) && a.Guaranteed.Equal(b.Guaranteed) && a.Limit.Equal(b.Limit) &&
		a.Priority.Equal(b.Priority) && a.OverQuotaWeight.Equal(b.OverQuotaWeight) &&
		a.Namespace.Equal(b.Namespace) && a.JobMetaKey.Equal(b.JobMetaKey) && a.MinRuntime.Equal(b.MinRuntime) && a.Department.Equal(b.Department) && a.Key.Equal(b.Key)
}

func model(project string, guaranteed float64, set func(*quotaModel)) quotaModel {
	m := quotaModel{Project: types.StringValue(project), Guaranteed: types.Float64Value(guaranteed),
		Limit: types.Float64Null(), Priority: types.Int64Null(), OverQuotaWeight: types.Int64Null(),
		Namespace: types.StringNull(), JobMetaKey: types.StringNull(), MinRuntime: types.StringNull(), Department: types.StringNull(), Key: types.StringNull()}
	if set != nil {
		set(&m)
	}
	return m
}

// TestQuotaDocumentRoundTrip: what a configuration writes reads back as
// the same configuration (so a second plan shows no change), and the
// document is the indented JSON a person reads in the Consul UI.
func TestQuotaDocumentRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		m    quotaModel
		want string
	}{
		{"guarantee only", model("team-a", 2, nil), "{\n  \"guaranteed\": 2\n}\n"},
		{"quarter GPUs", model("team-a", 1.25, nil), "{\n  \"guaranteed\": 1.25\n}\n"},
		{"every field", model("ml", 0.5, func(m *quotaModel) {
			m.Limit, m.Priority, m.OverQuotaWeight = types.Float64Value(4), types.Int64Value(10), types.Int64Value(3)
			m.Namespace, m.JobMetaKey = types.StringValue("ml-ns"), types.StringValue("project")
			m.MinRuntime, m.Department = types.StringValue("10m"), types.StringValue("research")
		}), "{\n  \"guaranteed\": 0.5,\n  \"limit\": 4,\n  \"priority\": 10,\n  \"over_quota_weight\": 3,\n  \"min_runtime\": \"10m\",\n  \"department\": \"research\",\n  \"mapping\": {\n    \"namespace\": \"ml-ns\",\n    \"job_meta_key\": \"project\"\n  }\n}\n"},
		{"explicit zero priority", model("p", 0, func(m *quotaModel) { m.Priority = types.Int64Value(0) }),
			"{\n  \"guaranteed\": 0,\n  \"priority\": 0\n}\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := tt.m.encode()
			if string(doc) != tt.want {
				t.Fatalf("document:\n%s\nwant:\n%s", doc, tt.want)
			}
			got, err := decodeQuota(tt.m.Project.ValueString(), doc)
			if err != nil {
				t.Fatalf("reading back %s: %v", doc, err)
			}
			if !sameQuota(got, tt.m) {
				t.Fatalf("read back %+v, want %+v", got, tt.m)
			}
		})
	}
}

// TestQuotaValidationNamesAttributeAndFix: a quota the service would
// reject fails at plan on the attribute at fault, with the fix.
func TestQuotaValidationNamesAttributeAndFix(t *testing.T) {
	tests := []struct {
		name      string
		m         quotaModel
		attribute path.Path
		mention   string
	}{
		{"limit below guarantee", model("team-a", 2, func(m *quotaModel) { m.Limit = types.Float64Value(1) }),
			path.Root("limit"), "raise \"limit\" to at least \"guaranteed\""},
		{"three decimals", model("team-a", 1.005, nil), path.Root("guaranteed"), "at most two decimals"},
		{"negative guarantee", model("team-a", -1, nil), path.Root("guaranteed"), "negative"},
		{"negative weight", model("team-a", 1, func(m *quotaModel) { m.OverQuotaWeight = types.Int64Value(-1) }),
			path.Root("over_quota_weight"), "between 0 (no share of the over-quota capacity) and 1000000"},
		{"priority out of range", model("team-a", 1, func(m *quotaModel) { m.Priority = types.Int64Value(2_000_000) }),
			path.Root("priority"), "between -1000000 and 1000000"},
		{"bad namespace", model("team-a", 1, func(m *quotaModel) { m.Namespace = types.StringValue("team a") }),
			path.Root("namespace"), "not a Nomad namespace name"},
		{"empty meta key", model("team-a", 1, func(m *quotaModel) { m.JobMetaKey = types.StringValue("") }),
			path.Root("job_meta_key"), "not a usable meta key"},
		{"nested project name", model("teams/a", 1, nil), path.Root("project"), "name like \"ml-team\""},
		{"bad department name", model("team-a", 1, func(m *quotaModel) { m.Department = types.StringValue("org/research") }),
			path.Root("department"), "not a department name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			at, summary, detail, ok := validationError(tt.m)
			if ok {
				t.Fatalf("%s passed validation", tt.m.encode())
			}
			if !at.Equal(tt.attribute) {
				t.Errorf("error on %s, want %s (%s: %s)", at, tt.attribute, summary, detail)
			}
			if !strings.Contains(detail, tt.mention) || !strings.Contains(detail, "Fix: ") {
				t.Errorf("detail %q does not say %q and the fix", detail, tt.mention)
			}
		})
	}
	if _, _, _, ok := validationError(model("team-a", 2.5, nil)); !ok {
		t.Fatal("a valid quota failed validation")
	}
}

// TestDecodeQuotaRejectsWhatTheServiceRejects: a document edited in KV
// into one the service rejects is not taken as the resource's state.
func TestDecodeQuotaRejectsWhatTheServiceRejects(t *testing.T) {
	for _, doc := range []string{`{"guaranteed": "2"}`, `{"guaranteed": 2, "gpus": 1}`, `not json`, `{"limit": 2}`} {
		if m, err := decodeQuota("team-a", []byte(doc)); err == nil {
			t.Errorf("%s read as %+v, want an error", doc, m)
		}
	}
}

// FuzzDecodeQuota: any stored document either is rejected or reads as a
// model that writes a document reading back the same.
func FuzzDecodeQuota(f *testing.F) {
	for _, s := range []string{`{"guaranteed": 2}`, `{"guaranteed": 0.5, "limit": 4, "priority": -3, "mapping": {"namespace": "x"}}`,
		`{"guaranteed": 1e2}`, `{"guaranteed": 1, "over_quota_weight": 7, "mapping": {"job_meta_key": "p"}}`, `{"guaranteed": 1, "min_runtime": "90s"}`, `{"guaranteed": 1, "department": "research"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		m, err := decodeQuota("p", []byte(doc))
		if err != nil {
			return
		}
		again, err := decodeQuota("p", m.encode())
		if err != nil {
			t.Fatalf("%q read as %+v, which writes %q, rejected: %v", doc, m, m.encode(), err)
		}
		if !sameQuota(again, m) {
			t.Fatalf("%q read as %+v, then as %+v", doc, m, again)
		}
	})
}
