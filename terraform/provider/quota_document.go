package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/gpushare/nomad-gpushare/quota-service/quota"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// quotaModel is a gpushare_quota resource. Optional attributes left null
// are left out of the document, where the service applies its defaults.
type quotaModel struct {
	Project         types.String  `tfsdk:"project"`
	Guaranteed      types.Float64 `tfsdk:"guaranteed"`
	Limit           types.Float64 `tfsdk:"limit"`
	Priority        types.Int64   `tfsdk:"priority"`
	OverQuotaWeight types.Int64   `tfsdk:"over_quota_weight"`
	Namespace       types.String  `tfsdk:"namespace"`
	JobMetaKey      types.String  `tfsdk:"job_meta_key"`
	MinRuntime      types.String  `tfsdk:"min_runtime"`
	Department      types.String  `tfsdk:"department"`
	Key             types.String  `tfsdk:"key"`
}

// document is the quota document as this provider writes and reads it:
// exactly the set attributes (quota-service/quota defines the format).
type document struct {
	Guaranteed      json.Number `json:"guaranteed"`
	Limit           json.Number `json:"limit,omitempty"`
	Priority        *int64      `json:"priority,omitempty"`
	OverQuotaWeight *int64      `json:"over_quota_weight,omitempty"`
	MinRuntime      *string     `json:"min_runtime,omitempty"`
	Department      *string     `json:"department,omitempty"`
	Mapping         *mapping    `json:"mapping,omitempty"`
}

type mapping struct {
	Namespace  *string `json:"namespace,omitempty"`
	JobMetaKey *string `json:"job_meta_key,omitempty"`
}

// known reports whether every attribute that goes into the document is
// known (at plan time a value may come from another resource).
func (m quotaModel) known() bool {
	for _, v := range []interface{ IsUnknown() bool }{m.Project, m.Guaranteed, m.Limit, m.Priority,
		m.OverQuotaWeight, m.Namespace, m.JobMetaKey, m.MinRuntime, m.Department} {
		if v.IsUnknown() {
			return false
		}
	}
	return true
}

// encode renders the model's quota document, indented so that it reads
// well in the Consul UI.
func (m quotaModel) encode() []byte {
	doc := document{Guaranteed: gpus(m.Guaranteed.ValueFloat64())}
	if !m.Limit.IsNull() {
		doc.Limit = gpus(m.Limit.ValueFloat64())
	}
	doc.Priority = m.Priority.ValueInt64Pointer()
	doc.OverQuotaWeight = m.OverQuotaWeight.ValueInt64Pointer()
	doc.MinRuntime = m.MinRuntime.ValueStringPointer()
	doc.Department = m.Department.ValueStringPointer()
	if !m.Namespace.IsNull() || !m.JobMetaKey.IsNull() {
		doc.Mapping = &mapping{Namespace: m.Namespace.ValueStringPointer(), JobMetaKey: m.JobMetaKey.ValueStringPointer()}
	}
	data, _ := json.MarshalIndent(doc, "", "  ") // plain values: never fails
	return append(data, '\n')
}

// gpus writes a GPU amount as the shortest decimal that reads back as
// the same float64 (1.5, not 1.50000001).
func gpus(v float64) json.Number {
	return json.Number(strconv.FormatFloat(v, 'f', -1, 64))
}

// decodeQuota validates a stored document with the service's parser and
// returns it as the model (Key left for the caller).
func decodeQuota(project string, data []byte) (quotaModel, error) {
	if _, err := quota.Parse(project, data); err != nil {
		return quotaModel{}, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc document
	if err := dec.Decode(&doc); err != nil {
		return quotaModel{}, fmt.Errorf("quota for project %q: %w", project, err)
	}
	m := quotaModel{Project: types.StringValue(project), Limit: types.Float64Null(),
		Priority: types.Int64PointerValue(doc.Priority), OverQuotaWeight: types.Int64PointerValue(doc.OverQuotaWeight),
		Namespace: types.StringNull(), JobMetaKey: types.StringNull(), MinRuntime: types.StringPointerValue(doc.MinRuntime),
		Department: types.StringPointerValue(doc.Department)}
	g, err := doc.Guaranteed.Float64()
	if err != nil {
		return quotaModel{}, fmt.Errorf("quota for project %q: guaranteed: %w", project, err)
	}
	m.Guaranteed = types.Float64Value(g)
	if doc.Limit != "" {
		l, err := doc.Limit.Float64()
		if err != nil {
			return quotaModel{}, fmt.Errorf("quota for project %q: limit: %w", project, err)
		}
		m.Limit = types.Float64Value(l)
	}
	if doc.Mapping != nil {
		m.Namespace = types.StringPointerValue(doc.Mapping.Namespace)
		m.JobMetaKey = types.StringPointerValue(doc.Mapping.JobMetaKey)
	}
	return m, nil
}

// attributeOf names the resource attribute that a quota document field
// is written from.
func attributeOf(field string) path.Path {
	switch field {
	case "", "mapping":
		return path.Empty()
	case "mapping.namespace":
		return path.Root("namespace")
	case "mapping.job_meta_key":
		return path.Root("job_meta_key")
	}
	return path.Root(field)
}

// validationError is what the service's parser says of a model: the
// attribute at fault and the message, or ok.
func validationError(m quotaModel) (at path.Path, summary, detail string, ok bool) {
	project := m.Project.ValueString()
	_, err := quota.Parse(project, m.encode())
	if err == nil {
		return path.Empty(), "", "", true
	}
	var fe *quota.FieldError
	if !errors.As(err, &fe) {
		return path.Empty(), "Invalid quota for project " + project, err.Error(), false
	}
	at = attributeOf(fe.Field)
	if fe.Field == "" {
		// encode writes well-formed JSON: a document-level error can
		// only be about the project name, the key's last segment.
		at = path.Root("project")
	}
	return at, fmt.Sprintf("Invalid quota for project %q", project),
		fmt.Sprintf("%s: %s.\nFix: %s.", describe(fe.Field), fe.Problem, fe.Fix), false
}

func describe(field string) string {
	if a := attributeOf(field); !a.Equal(path.Empty()) {
		return a.String()
	}
	return "the quota document"
}
