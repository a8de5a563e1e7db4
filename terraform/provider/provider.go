// Package provider is the gpushare provider for Terraform and OpenTofu.
//
// Its main resource, gpushare_quota, writes one project's quota document
// to Consul KV (<kv_prefix>/quotas/<project>) and validates it at plan time
// with the quota service's own parser (quota-service/quota), so a quota the
// service would reject fails `plan` with the field and the fix. Reading it
// back turns changes made in KV into a diff.
//
// Provisioning gpushare also needs Consul ACL policies and tokens and a Nomad
// Variable holding the service's tokens. The providers that would make them
// (hashicorp/consul, hashicorp/nomad 2.x) cannot be built where gpushare is
// built and tested, so this provider carries three small stand-ins with the
// same attributes as theirs: gpushare_consul_acl_policy,
// gpushare_consul_acl_token and gpushare_nomad_variable.
package provider

import (
	"context"
	"fmt"

	"github.com/gpushare/nomad-gpushare/quota-service/kvlayout"
	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// New returns the provider factory for providerserver.Serve.
func New(version string) func() provider.Provider {
	return func() provider.Provider { return &gpushareProvider{version: version} }
}

type gpushareProvider struct {
	version string
}

// providerModel is the provider block.
type providerModel struct {
	ConsulAddress types.String `tfsdk:"consul_address"`
	ConsulToken   types.String `tfsdk:"consul_token"`
	NomadAddress  types.String `tfsdk:"nomad_address"`
	NomadToken    types.String `tfsdk:"nomad_token"`
	KVPrefix      types.String `tfsdk:"kv_prefix"`
}

// clients is what the resources are configured with.
type clients struct {
	consul *consulapi.Client
	nomad  *nomadapi.Client
	layout kvlayout.Layout
}

func (p *gpushareProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "gpushare"
	resp.Version = p.version
}

func (p *gpushareProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "gpushare: guaranteed GPU quotas for Nomad. Unset attributes come from the environment as for the consul and nomad CLIs (CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN, CONSUL_CACERT, ..., NOMAD_ADDR, NOMAD_TOKEN, NOMAD_CACERT, ...).",
		Attributes: map[string]schema.Attribute{
			"consul_address": schema.StringAttribute{Optional: true,
				Description: "Consul HTTP address holding the quotas, e.g. \"127.0.0.1:8500\". Default: CONSUL_HTTP_ADDR, else 127.0.0.1:8500."},
			"consul_token": schema.StringAttribute{Optional: true, Sensitive: true,
				Description: "Consul ACL token: write on the quotas folder; acl = \"write\" for the ACL resources. Default: CONSUL_HTTP_TOKEN."},
			"nomad_address": schema.StringAttribute{Optional: true,
				Description: "Nomad HTTP address for gpushare_nomad_variable. Default: NOMAD_ADDR, else http://127.0.0.1:4646."},
			"nomad_token": schema.StringAttribute{Optional: true, Sensitive: true,
				Description: "Nomad ACL token for gpushare_nomad_variable. Default: NOMAD_TOKEN."},
			"kv_prefix": schema.StringAttribute{Optional: true,
				Description: "Root of the quota service's Consul keys (its -kv-prefix). Default \"gpushare\"."},
		},
	}
}

func (p *gpushareProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var m providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	for name, v := range map[string]types.String{"consul_address": m.ConsulAddress, "consul_token": m.ConsulToken,
		"nomad_address": m.NomadAddress, "nomad_token": m.NomadToken, "kv_prefix": m.KVPrefix} {
		if v.IsUnknown() {
			resp.Diagnostics.AddError("gpushare provider: "+name+" is not known at plan time",
				"Set "+name+" from a value known before apply (a variable or the environment), not from a resource created in the same run.")
		}
	}
	if resp.Diagnostics.HasError() {
		return
	}
	c, err := newClients(m)
	if err != nil {
		resp.Diagnostics.AddError("gpushare provider: cannot build the API clients", err.Error())
		return
	}
	resp.ResourceData = c
}

// newClients builds the Consul and Nomad clients from the environment, with
// the provider block's attributes on top.
func newClients(m providerModel) (*clients, error) {
	ccfg := consulapi.DefaultConfig()
	if v := m.ConsulAddress.ValueString(); v != "" {
		ccfg.Address = v
	}
	if v := m.ConsulToken.ValueString(); v != "" {
		ccfg.Token = v
	}
	consul, err := consulapi.NewClient(ccfg)
	if err != nil {
		return nil, fmt.Errorf("consul_address %q: %w", ccfg.Address, err)
	}
	ncfg := nomadapi.DefaultConfig()
	if v := m.NomadAddress.ValueString(); v != "" {
		ncfg.Address = v
	}
	if v := m.NomadToken.ValueString(); v != "" {
		ncfg.SecretID = v
	}
	nomad, err := nomadapi.NewClient(ncfg)
	if err != nil {
		return nil, fmt.Errorf("nomad_address %q: %w", ncfg.Address, err)
	}
	return &clients{consul: consul, nomad: nomad, layout: kvlayout.New(m.KVPrefix.ValueString())}, nil
}

func (p *gpushareProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{
		func() resource.Resource { return &quotaResource{} },
		func() resource.Resource { return &departmentResource{} },
		func() resource.Resource { return &consulPolicyResource{} },
		func() resource.Resource { return &consulTokenResource{} },
		func() resource.Resource { return &nomadVariableResource{} },
	}
}

func (p *gpushareProvider) DataSources(context.Context) []func() datasource.DataSource {
	return nil
}

// configured is the shared Configure of the resources: it takes the
// provider's clients (nil before the provider is configured).
func configured(data any, target **clients, add func(summary, detail string)) {
	if data == nil {
		return
	}
	c, ok := data.(*clients)
	if !ok {
		add("gpushare provider: unexpected provider data", fmt.Sprintf("got %T; this is a bug in the provider", data))
		return
	}
	*target = c
}
