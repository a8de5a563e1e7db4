package provider

import (
	"context"
	"fmt"

	"github.com/gpushare/nomad-gpushare/quota-service/quota"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// departmentResource is gpushare_department: one department's document
// in KV.
type departmentResource struct {
	c *clients
}

var (
	_ resource.ResourceWithConfigure      = (*departmentResource)(nil)
	_ resource.ResourceWithImportState    = (*departmentResource)(nil)
	_ resource.ResourceWithValidateConfig = (*departmentResource)(nil)
)

func (r *departmentResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_department"
}

func (r *departmentResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A department: projects grouped one level up (gpushare_quota's department names it), the JSON document at <kv_prefix>/departments/<name>. Its projects' guarantees fit within its own; surplus goes first to its projects, then across departments by their weights. Departments do not nest. Validated at plan time by the service's own parser. Import with the department name.",
		Attributes: map[string]schema.Attribute{
			"name": schema.StringAttribute{Required: true,
				Description:   "Department name (1-128 letters, digits, '.', '-', '_').",
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()}},
			"guaranteed": schema.Float64Attribute{Required: true,
				Description: "Guaranteed GPUs, at most two decimals; its projects' guarantees must add up to at most this (else the service keeps the department's and those projects' last good settings and reports it)."},
			"limit": schema.Float64Attribute{Optional: true,
				Description: "Hard cap in GPUs for its projects together, at least guaranteed. Unset: no cap."},
			"priority": schema.Int64Attribute{Optional: true,
				Description: "Higher wins over-quota capacity between departments and loses it last. Unset: 0."},
			"over_quota_weight": schema.Int64Attribute{Optional: true,
				Description: "Share of over-quota capacity among departments (and projects on their own) of equal priority (0-1000000; 0: none). Unset: 1."},
			"key": schema.StringAttribute{Computed: true,
				Description:   "The Consul key of the document.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}},
		},
	}
}

func (r *departmentResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	configured(req.ProviderData, &r.c, resp.Diagnostics.AddError)
}

// ValidateConfig runs the service's parser on the document the
// configuration describes, at `validate` and `plan`.
func (r *departmentResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m departmentModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || !m.known() || m.Guaranteed.IsNull() {
		return
	}
	if at, summary, detail, ok := departmentValidationError(m); !ok {
		resp.Diagnostics.AddAttributeError(at, summary, detail)
	}
}

// doc is the resource's Consul key.
func (r *departmentResource) doc() kvDocument {
	return kvDocument{c: r.c, holds: "department", valid: func(name string, value []byte) bool {
		_, err := quota.ParseDepartment(name, value)
		return err == nil
	}}
}

func (r *departmentResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m departmentModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	key := r.c.layout.Department(m.Name.ValueString())
	if err := r.doc().create(ctx, m.Name.ValueString(), key, m.encode()); err != nil {
		resp.Diagnostics.AddError("Cannot create department", err.Error())
		return
	}
	m.Key = types.StringValue(key)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *departmentResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m departmentModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	name := m.Name.ValueString()
	key := r.c.layout.Department(name)
	value, found, err := r.doc().read(ctx, key)
	if err != nil {
		resp.Diagnostics.AddError("Cannot read department", err.Error())
		return
	}
	if !found {
		resp.State.RemoveResource(ctx)
		return
	}
	got, err := decodeDepartment(name, value)
	if err != nil {
		resp.Diagnostics.AddWarning("The department document in Consul is invalid",
			fmt.Sprintf("%s: %v. The service keeps the last good settings in force; apply writes the configured document.", key, err))
		resp.State.RemoveResource(ctx)
		return
	}
	got.Key = types.StringValue(key)
	resp.Diagnostics.Append(resp.State.Set(ctx, &got)...)
}

func (r *departmentResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m departmentModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	key := r.c.layout.Department(m.Name.ValueString())
	if err := r.doc().put(ctx, key, m.encode()); err != nil {
		resp.Diagnostics.AddError("Cannot update department", err.Error())
		return
	}
	m.Key = types.StringValue(key)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *departmentResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m departmentModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if err := r.doc().delete(ctx, r.c.layout.Department(m.Name.ValueString())); err != nil {
		resp.Diagnostics.AddError("Cannot delete department", err.Error())
	}
}

func (r *departmentResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resource.ImportStatePassthroughID(ctx, path.Root("name"), req, resp)
}
