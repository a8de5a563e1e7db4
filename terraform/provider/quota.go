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

// quotaResource is gpushare_quota: one project's quota document in KV.
type quotaResource struct {
	c *clients
}

var (
	_ resource.ResourceWithConfigure      = (*quotaResource)(nil)
	_ resource.ResourceWithImportState    = (*quotaResource)(nil)
	_ resource.ResourceWithValidateConfig = (*quotaResource)(nil)
)

func (r *quotaResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_quota"
}

func (r *quotaResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A project's guaranteed GPU quota: the JSON document at <kv_prefix>/quotas/<project> that the gpushare quota service reads. Validated at plan time by the service's own parser. Import with the project name.",
		Attributes: map[string]schema.Attribute{
			"project": schema.StringAttribute{Required: true,
				Description:   "Project name (1-128 letters, digits, '.', '-', '_'); by default the Nomad namespace of the same name.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()}},
			"guaranteed": schema.Float64Attribute{Required: true,
				Description: "Guaranteed GPUs, at most two decimals (0.25 is a quarter GPU); 0 for no guarantee."},
			"limit": schema.Float64Attribute{Optional: true,
				Description: "Hard cap in GPUs, at least guaranteed. Unset: no cap."},
			"priority": schema.Int64Attribute{Optional: true,
				Description: "Higher wins over-quota capacity and loses it last. Unset: 0."},
			"over_quota_weight": schema.Int64Attribute{Optional: true,
				Description: "Share of over-quota capacity among projects of equal priority (0-1000000; 0: none, idle GPUs only while nobody else wants them). Unset: 1."},
			"min_runtime": schema.StringAttribute{Optional: true,
				Description: "How long the project's jobs run before reclaim for a project above its guarantee, or preemption inside the project, may take them (a duration such as \"10m\", at most 24h). Restoring another project's guarantee never waits for it. Unset: none."},
			"department": schema.StringAttribute{Optional: true,
				Description: "The project's department (a gpushare_department's name): its guarantee counts within the department's, and it shares the department's surplus first. Write the department first (reference it, e.g. gpushare_department.research.name): the service does not take a project naming a department it does not know. Unset: the project is on its own."},
			"namespace": schema.StringAttribute{Optional: true,
				Description: "Nomad namespace whose jobs belong to the project. Unset: the project name."},
			"job_meta_key": schema.StringAttribute{Optional: true,
				Description: "A job whose meta value under this key is the project's name belongs to it, whatever its namespace."},
			"key": schema.StringAttribute{Computed: true,
				Description:   "The Consul key of the document.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}},
		},
	}
}

func (r *quotaResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	configured(req.ProviderData, &r.c, resp.Diagnostics.AddError)
}

// ValidateConfig runs the service's parser on the document the
// configuration describes, at `validate` and `plan`.
func (r *quotaResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m quotaModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || !m.known() || m.Guaranteed.IsNull() {
		return
	}
	if at, summary, detail, ok := validationError(m); !ok {
		if at.Equal(path.Empty()) {
			resp.Diagnostics.AddError(summary, detail)
			return
		}
		resp.Diagnostics.AddAttributeError(at, summary, detail)
	}
}

// doc is the resource's Consul key.
func (r *quotaResource) doc() kvDocument {
	return kvDocument{c: r.c, holds: "a quota for project", valid: func(name string, value []byte) bool {
		_, err := quota.Parse(name, value)
		return err == nil
	}}
}

func (r *quotaResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m quotaModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	key := r.c.layout.Quota(m.Project.ValueString())
	if err := r.doc().create(ctx, m.Project.ValueString(), key, m.encode()); err != nil {
		resp.Diagnostics.AddError("Cannot create quota", err.Error())
		return
	}
	m.Key = types.StringValue(key)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *quotaResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m quotaModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	name := m.Project.ValueString()
	key := r.c.layout.Quota(name)
	value, found, err := r.doc().read(ctx, key)
	if err != nil {
		resp.Diagnostics.AddError("Cannot read quota", err.Error())
		return
	}
	if !found {
		resp.State.RemoveResource(ctx)
		return
	}
	got, err := decodeQuota(name, value)
	if err != nil {
		resp.Diagnostics.AddWarning("The quota document in Consul is invalid",
			fmt.Sprintf("%s: %v. The service keeps the last good settings in force; apply writes the configured document.", key, err))
		resp.State.RemoveResource(ctx)
		return
	}
	got.Key = types.StringValue(key)
	resp.Diagnostics.Append(resp.State.Set(ctx, &got)...)
}

func (r *quotaResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m quotaModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	key := r.c.layout.Quota(m.Project.ValueString())
	if err := r.doc().put(ctx, key, m.encode()); err != nil {
		resp.Diagnostics.AddError("Cannot update quota", err.Error())
		return
	}
	m.Key = types.StringValue(key)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *quotaResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m quotaModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if err := r.doc().delete(ctx, r.c.layout.Quota(m.Project.ValueString())); err != nil {
		resp.Diagnostics.AddError("Cannot delete quota", err.Error())
	}
}

func (r *quotaResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resource.ImportStatePassthroughID(ctx, path.Root("project"), req, resp)
}
