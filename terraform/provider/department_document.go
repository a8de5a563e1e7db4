package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gpushare/nomad-gpushare/quota-service/quota"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// departmentModel is a gpushare_department resource. Optional attributes
// left null are left out of the document, where the service applies its
// defaults.
type departmentModel struct {
	Name            types.String  `tfsdk:"name"`
	Guaranteed      types.Float64 `tfsdk:"guaranteed"`
	Limit           types.Float64 `tfsdk:"limit"`
	Priority        types.Int64   `tfsdk:"priority"`
	OverQuotaWeight types.Int64   `tfsdk:"over_quota_weight"`
	Key             types.String  `tfsdk:"key"`
}

// departmentDocument is the department document as this provider writes
// and reads it (quota-service/quota defines the format).
type departmentDocument struct {
	Guaranteed      json.Number `json:"guaranteed"`
	Limit           json.Number `json:"limit,omitempty"`
	Priority        *int64      `json:"priority,omitempty"`
	OverQuotaWeight *int64      `json:"over_quota_weight,omitempty"`
}

// known reports whether every attribute that goes into the document is
// known.
func (m departmentModel) known() bool {
	for _, v := range []interface{ IsUnknown() bool }{m.Name, m.Guaranteed, m.Limit, m.Priority, m.OverQuotaWeight} {
		if v.IsUnknown() {
			return false
		}
	}
	return true
}

// encode renders the model's department document, indented.
func (m departmentModel) encode() []byte {
	doc := departmentDocument{Guaranteed: gpus(m.Guaranteed.ValueFloat64()),
		Priority: m.Priority.ValueInt64Pointer(), OverQuotaWeight: m.OverQuotaWeight.ValueInt64Pointer()}
	if !m.Limit.IsNull() {
		doc.Limit = gpus(m.Limit.ValueFloat64())
	}
	data, _ := json.MarshalIndent(doc, "", "  ") // plain values: never fails
	return append(data, '\n')
}

// decodeDepartment validates a stored document with the service's parser
// and returns it as the model (Key left for the caller).
func decodeDepartment(name string, data []byte) (departmentModel, error) {
	if _, err := quota.ParseDepartment(name, data); err != nil {
		return departmentModel{}, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc departmentDocument
	if err := dec.Decode(&doc); err != nil {
		return departmentModel{}, fmt.Errorf("department %q: %w", name, err)
	}
	m := departmentModel{Name: types.StringValue(name), Limit: types.Float64Null(),
		Priority: types.Int64PointerValue(doc.Priority), OverQuotaWeight: types.Int64PointerValue(doc.OverQuotaWeight)}
	g, err := doc.Guaranteed.Float64()
	if err != nil {
		return departmentModel{}, fmt.Errorf("department %q: guaranteed: %w", name, err)
	}
	m.Guaranteed = types.Float64Value(g)
	if doc.Limit != "" {
		l, err := doc.Limit.Float64()
		if err != nil {
			return departmentModel{}, fmt.Errorf("department %q: limit: %w", name, err)
		}
		m.Limit = types.Float64Value(l)
	}
	return m, nil
}

// departmentValidationError is what the service's parser says of a
// model: the attribute at fault and the message, or ok.
func departmentValidationError(m departmentModel) (at path.Path, summary, detail string, ok bool) {
	name := m.Name.ValueString()
	_, err := quota.ParseDepartment(name, m.encode())
	if err == nil {
		return path.Empty(), "", "", true
	}
	summary = fmt.Sprintf("Invalid department %q", name)
	var fe *quota.FieldError
	if !errors.As(err, &fe) {
		return path.Empty(), summary, err.Error(), false
	}
	at = path.Root(fe.Field)
	if fe.Field == "" {
		// encode writes well-formed JSON: a document-level error can
		// only be about the name, the key's last segment.
		at = path.Root("name")
	}
	return at, summary, fmt.Sprintf("%s: %s.\nFix: %s.", at, fe.Problem, fe.Fix), false
}
