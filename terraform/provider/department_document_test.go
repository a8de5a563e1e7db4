package provider

import (
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

func sameDepartment(a, b departmentModel) bool {
	return a.Name.Equal(b.Name) && a.Guaranteed.Equal(b.Guaranteed) && a.Limit.Equal(b.Limit) &&
		a.Priority.Equal(b.Priority) && a.OverQuotaWeight.Equal(b.OverQuotaWeight) && a.Key.Equal(b.Key)
}

func departmentOf(name string, guaranteed float64, set func(*departmentModel)) departmentModel {
	m := departmentModel{Name: types.StringValue(name), Guaranteed: types.Float64Value(guaranteed),
		Limit: types.Float64Null(), Priority: types.Int64Null(), OverQuotaWeight: types.Int64Null(), Key: types.StringNull()}
	if set != nil {
		set(&m)
	}
	return m
}

// TestDepartmentDocumentRoundTrip: what a configuration writes reads back
// as the same configuration, as indented JSON.
func TestDepartmentDocumentRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		m    departmentModel
		want string
	}{
		{"guarantee only", departmentOf("research", 4, nil), "{\n  \"guaranteed\": 4\n}\n"},
		{"every field", departmentOf("research", 4.5, func(m *departmentModel) {
			m.Limit, m.Priority, m.OverQuotaWeight = types.Float64Value(8), types.Int64Value(2), types.Int64Value(0)
		}), "{\n  \"guaranteed\": 4.5,\n  \"limit\": 8,\n  \"priority\": 2,\n  \"over_quota_weight\": 0\n}\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := tt.m.encode()
			if string(doc) != tt.want {
				t.Fatalf("document:\n%s\nwant:\n%s", doc, tt.want)
			}
			got, err := decodeDepartment(tt.m.Name.ValueString(), doc)
			if err != nil {
				t.Fatalf("reading back %s: %v", doc, err)
			}
			if !sameDepartment(got, tt.m) {
				t.Fatalf("read back %+v, want %+v", got, tt.m)
			}
		})
	}
}

// TestDepartmentValidationNamesAttributeAndFix: a department the service
// would reject fails at plan on the attribute at fault, with the fix.
func TestDepartmentValidationNamesAttributeAndFix(t *testing.T) {
	tests := []struct {
		name      string
		m         departmentModel
		attribute path.Path
		mention   string
	}{
		{"limit below guarantee", departmentOf("research", 4, func(m *departmentModel) { m.Limit = types.Float64Value(2) }),
			path.Root("limit"), "raise \"limit\" to at least \"guaranteed\""},
		{"three decimals", departmentOf("research", 1.005, nil), path.Root("guaranteed"), "at most two decimals"},
		{"nested name", departmentOf("org/research", 1, nil), path.Root("name"), "directly under the departments folder"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			at, summary, detail, ok := departmentValidationError(tt.m)
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
}

// TestDecodeDepartmentRejectsWhatTheServiceRejects: a document edited in
// KV into one the service rejects (a nested department among them) is not
// taken as the resource's state.
func TestDecodeDepartmentRejectsWhatTheServiceRejects(t *testing.T) {
	for _, doc := range []string{`{"guaranteed": "2"}`, `{"guaranteed": 2, "department": "org"}`, `{"guaranteed": 2, "min_runtime": "1m"}`, `not json`} {
		if m, err := decodeDepartment("research", []byte(doc)); err == nil {
			t.Errorf("%s read as %+v, want an error", doc, m)
		}
	}
}
