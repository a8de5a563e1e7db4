package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"

	nomadapi "github.com/hashicorp/nomad/api"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// nomadVariableResource is gpushare_nomad_variable, a stand-in for
// nomad_variable of hashicorp/nomad 2.x (same attributes). Its use here:
// the quota service's tokens at nomad/jobs/<job>, which only that job's
// tasks can read, rendered into their environment by a template.
type nomadVariableResource struct {
	c *clients
}

type nomadVariableModel struct {
	Namespace types.String `tfsdk:"namespace"`
	Path      types.String `tfsdk:"path"`
	Items     types.Map    `tfsdk:"items"`
}

var (
	_ resource.ResourceWithConfigure   = (*nomadVariableResource)(nil)
	_ resource.ResourceWithImportState = (*nomadVariableResource)(nil)
)

func (r *nomadVariableResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_nomad_variable"
}

func (r *nomadVariableResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	replace := []planmodifier.String{stringplanmodifier.RequiresReplace()}
	resp.Schema = schema.Schema{
		Description: "A Nomad Variable, as nomad_variable of the hashicorp/nomad provider 2.x. Import with \"<namespace>/<path>\".",
		Attributes: map[string]schema.Attribute{
			"namespace": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString("default"),
				Description: "The variable's namespace.", PlanModifiers: replace},
			"path": schema.StringAttribute{Required: true, PlanModifiers: replace,
				Description: "The variable's path, e.g. nomad/jobs/<job>: the job's tasks may read it."},
			"items": schema.MapAttribute{Required: true, Sensitive: true, ElementType: types.StringType,
				Description: "The variable's keys and values."},
		},
	}
}

func (r *nomadVariableResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	configured(req.ProviderData, &r.c, resp.Diagnostics.AddError)
}

// Create writes the variable only where none is: a variable already at
// the path is another owner's (another install's tokens, say), and
// destroy would delete it.
func (r *nomadVariableResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	r.put(ctx, req.Plan, &resp.State, &resp.Diagnostics, true)
}

func (r *nomadVariableResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	r.put(ctx, req.Plan, &resp.State, &resp.Diagnostics, false)
}

// put writes the planned variable (with create, only if there is none
// at its path) and records it.
func (r *nomadVariableResource) put(ctx context.Context, plan tfsdk.Plan, state *tfsdk.State, diags *diag.Diagnostics, create bool) {
	var m nomadVariableModel
	diags.Append(plan.Get(ctx, &m)...)
	items := map[string]string{}
	diags.Append(m.Items.ElementsAs(ctx, &items, false)...)
	if diags.HasError() {
		return
	}
	v := &nomadapi.Variable{Namespace: m.Namespace.ValueString(), Path: m.Path.ValueString(), Items: items}
	write, opts := r.c.nomad.Variables().Create, (&nomadapi.WriteOptions{Namespace: v.Namespace}).WithContext(ctx)
	if create {
		write = r.c.nomad.Variables().CheckedCreate
	}
	if _, _, err := write(v, opts); err != nil {
		var conflict nomadapi.ErrCASConflict
		if errors.As(err, &conflict) {
			diags.AddError("Nomad variable "+v.Path+" already exists",
				fmt.Sprintf("namespace %s: it is not in this state, so another install or person made it; adopt it with %s, or install beside it under another name (the module's name variable)",
					v.Namespace, importCommand(v.Namespace+"/"+v.Path)))
			return
		}
		diags.AddError("Cannot write Nomad variable "+v.Path, fmt.Sprintf("namespace %s: %v", v.Namespace, err))
		return
	}
	diags.Append(state.Set(ctx, &m)...)
}

func (r *nomadVariableResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m nomadVariableModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	ns := m.Namespace.ValueString()
	v, _, err := r.c.nomad.Variables().Peek(m.Path.ValueString(), (&nomadapi.QueryOptions{Namespace: ns}).WithContext(ctx))
	if err != nil {
		resp.Diagnostics.AddError("Cannot read Nomad variable "+m.Path.ValueString(), fmt.Sprintf("namespace %s: %v", ns, err))
		return
	}
	if v == nil {
		resp.State.RemoveResource(ctx)
		return
	}
	items, diags := types.MapValueFrom(ctx, types.StringType, map[string]string(v.Items))
	resp.Diagnostics.Append(diags...)
	m.Items = items
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *nomadVariableResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m nomadVariableModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	ns := m.Namespace.ValueString()
	if _, err := r.c.nomad.Variables().Delete(m.Path.ValueString(), (&nomadapi.WriteOptions{Namespace: ns}).WithContext(ctx)); err != nil {
		resp.Diagnostics.AddError("Cannot delete Nomad variable "+m.Path.ValueString(), fmt.Sprintf("namespace %s: %v", ns, err))
	}
}

func (r *nomadVariableResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	ns, p, ok := strings.Cut(req.ID, "/")
	if !ok || ns == "" || p == "" {
		resp.Diagnostics.AddError("Invalid import ID", fmt.Sprintf("%q: use \"<namespace>/<path>\", e.g. default/nomad/jobs/gpushare-quota", req.ID))
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("namespace"), ns)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("path"), p)...)
}
