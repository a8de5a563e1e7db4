package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// consulNotFound reports whether err is Consul's answer for an ACL object
// that does not exist.
func consulNotFound(err error) bool {
	var se consulapi.StatusError
	return errors.As(err, &se) && strings.Contains(se.Body, "ACL not found") ||
		err != nil && strings.Contains(err.Error(), "ACL not found")
}

// consulPolicyResource is gpushare_consul_acl_policy, a stand-in for
// hashicorp/consul's consul_acl_policy (same attributes).
type consulPolicyResource struct {
	c *clients
}

type consulPolicyModel struct {
	ID          types.String `tfsdk:"id"`
	Name        types.String `tfsdk:"name"`
	Description types.String `tfsdk:"description"`
	Rules       types.String `tfsdk:"rules"`
}

var (
	_ resource.ResourceWithConfigure   = (*consulPolicyResource)(nil)
	_ resource.ResourceWithImportState = (*consulPolicyResource)(nil)
)

func (r *consulPolicyResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_consul_acl_policy"
}

func (r *consulPolicyResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A Consul ACL policy, as consul_acl_policy of the hashicorp/consul provider. Import with the policy ID.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{Computed: true, Description: "The policy's ID.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}},
			"name":        schema.StringAttribute{Required: true, Description: "The policy's name."},
			"description": schema.StringAttribute{Optional: true, Description: "What the policy is for."},
			"rules":       schema.StringAttribute{Required: true, Description: "The policy's rules, in HCL."},
		},
	}
}

func (r *consulPolicyResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	configured(req.ProviderData, &r.c, resp.Diagnostics.AddError)
}

func (m consulPolicyModel) policy() *consulapi.ACLPolicy {
	return &consulapi.ACLPolicy{ID: m.ID.ValueString(), Name: m.Name.ValueString(),
		Description: m.Description.ValueString(), Rules: m.Rules.ValueString()}
}

func (r *consulPolicyResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m consulPolicyModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	m.ID = types.StringNull()
	p, _, err := r.c.consul.ACL().PolicyCreate(m.policy(), (&consulapi.WriteOptions{}).WithContext(ctx))
	if err != nil {
		resp.Diagnostics.AddError("Cannot create Consul ACL policy "+m.Name.ValueString(), err.Error())
		return
	}
	m.ID = types.StringValue(p.ID)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *consulPolicyResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m consulPolicyModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	p, _, err := r.c.consul.ACL().PolicyRead(m.ID.ValueString(), (&consulapi.QueryOptions{}).WithContext(ctx))
	switch {
	case consulNotFound(err) || err == nil && p == nil:
		resp.State.RemoveResource(ctx)
		return
	case err != nil:
		resp.Diagnostics.AddError("Cannot read Consul ACL policy "+m.ID.ValueString(), err.Error())
		return
	}
	m.Name, m.Rules = types.StringValue(p.Name), types.StringValue(p.Rules)
	if p.Description != "" || !m.Description.IsNull() {
		m.Description = types.StringValue(p.Description)
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *consulPolicyResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m consulPolicyModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if _, _, err := r.c.consul.ACL().PolicyUpdate(m.policy(), (&consulapi.WriteOptions{}).WithContext(ctx)); err != nil {
		resp.Diagnostics.AddError("Cannot update Consul ACL policy "+m.Name.ValueString(), err.Error())
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *consulPolicyResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m consulPolicyModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if _, err := r.c.consul.ACL().PolicyDelete(m.ID.ValueString(), (&consulapi.WriteOptions{}).WithContext(ctx)); err != nil && !consulNotFound(err) {
		resp.Diagnostics.AddError("Cannot delete Consul ACL policy "+m.Name.ValueString(), err.Error())
	}
}

func (r *consulPolicyResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resource.ImportStatePassthroughID(ctx, path.Root("id"), req, resp)
}

// consulTokenResource is gpushare_consul_acl_token, a stand-in for
// hashicorp/consul's consul_acl_token; unlike it, the secret is an
// attribute (no separate data source).
type consulTokenResource struct {
	c *clients
}

type consulTokenModel struct {
	AccessorID  types.String `tfsdk:"accessor_id"`
	Description types.String `tfsdk:"description"`
	Policies    types.Set    `tfsdk:"policies"`
	SecretID    types.String `tfsdk:"secret_id"`
}

var (
	_ resource.ResourceWithConfigure   = (*consulTokenResource)(nil)
	_ resource.ResourceWithImportState = (*consulTokenResource)(nil)
)

func (r *consulTokenResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_consul_acl_token"
}

func (r *consulTokenResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	keep := []planmodifier.String{stringplanmodifier.UseStateForUnknown()}
	resp.Schema = schema.Schema{
		Description: "A Consul ACL token holding the named policies, as consul_acl_token of the hashicorp/consul provider. Import with the accessor ID.",
		Attributes: map[string]schema.Attribute{
			"accessor_id": schema.StringAttribute{Computed: true, Description: "The token's accessor ID.", PlanModifiers: keep},
			"description": schema.StringAttribute{Optional: true, Description: "What the token is for."},
			"policies": schema.SetAttribute{Required: true, ElementType: types.StringType,
				Description: "Names of the policies the token holds."},
			"secret_id": schema.StringAttribute{Computed: true, Sensitive: true, PlanModifiers: keep,
				Description: "The token's secret: what a client sends as CONSUL_HTTP_TOKEN."},
		},
	}
}

func (r *consulTokenResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	configured(req.ProviderData, &r.c, resp.Diagnostics.AddError)
}

func (m consulTokenModel) token(ctx context.Context) (*consulapi.ACLToken, error) {
	var names []string
	if diags := m.Policies.ElementsAs(ctx, &names, false); diags.HasError() {
		return nil, fmt.Errorf("policies: %v", diags)
	}
	t := &consulapi.ACLToken{AccessorID: m.AccessorID.ValueString(), SecretID: m.SecretID.ValueString(),
		Description: m.Description.ValueString()}
	for _, n := range names {
		t.Policies = append(t.Policies, &consulapi.ACLTokenPolicyLink{Name: n})
	}
	return t, nil
}

func (r *consulTokenResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	r.write(ctx, req.Plan, &resp.State, &resp.Diagnostics, true)
}

func (r *consulTokenResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	r.write(ctx, req.Plan, &resp.State, &resp.Diagnostics, false)
}

func (r *consulTokenResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m consulTokenModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	t, _, err := r.c.consul.ACL().TokenRead(m.AccessorID.ValueString(), (&consulapi.QueryOptions{}).WithContext(ctx))
	switch {
	case consulNotFound(err) || err == nil && t == nil:
		resp.State.RemoveResource(ctx)
		return
	case err != nil:
		resp.Diagnostics.AddError("Cannot read Consul ACL token "+m.AccessorID.ValueString(), err.Error())
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, tokenModel(t, m.Description))...)
}

func (r *consulTokenResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m consulTokenModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if _, err := r.c.consul.ACL().TokenDelete(m.AccessorID.ValueString(), (&consulapi.WriteOptions{}).WithContext(ctx)); err != nil && !consulNotFound(err) {
		resp.Diagnostics.AddError("Cannot delete Consul ACL token "+m.AccessorID.ValueString(), err.Error())
	}
}

func (r *consulTokenResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resource.ImportStatePassthroughID(ctx, path.Root("accessor_id"), req, resp)
}
