package provider

import (
	"context"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// write creates (create) or updates the planned token and records what
// Consul answered.
func (r *consulTokenResource) write(ctx context.Context, plan tfsdk.Plan, state *tfsdk.State, diags *diag.Diagnostics, create bool) {
	var m consulTokenModel
	diags.Append(plan.Get(ctx, &m)...)
	if diags.HasError() {
		return
	}
	t, err := m.token(ctx)
	if err != nil {
		diags.AddError("Invalid Consul ACL token", err.Error())
		return
	}
	wo := (&consulapi.WriteOptions{}).WithContext(ctx)
	var got *consulapi.ACLToken
	if create {
		t.AccessorID, t.SecretID = "", ""
		got, _, err = r.c.consul.ACL().TokenCreate(t, wo)
	} else {
		got, _, err = r.c.consul.ACL().TokenUpdate(t, wo)
	}
	if err != nil {
		diags.AddError("Cannot write Consul ACL token", err.Error())
		return
	}
	diags.Append(state.Set(ctx, tokenModel(got, m.Description))...)
}

// tokenModel is the state of token t; description stays null when it was
// and Consul holds none.
func tokenModel(t *consulapi.ACLToken, description types.String) *consulTokenModel {
	names := make([]string, 0, len(t.Policies))
	for _, p := range t.Policies {
		names = append(names, p.Name)
	}
	policies, _ := types.SetValueFrom(context.Background(), types.StringType, names)
	m := &consulTokenModel{AccessorID: types.StringValue(t.AccessorID), SecretID: types.StringValue(t.SecretID),
		Policies: policies, Description: description}
	if t.Description != "" || !description.IsNull() {
		m.Description = types.StringValue(t.Description)
	}
	return m
}
