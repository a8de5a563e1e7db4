package demo

import (
	"fmt"

	"github.com/gpushare/nomad-gpushare/internal/aclpolicy"
	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	nomadapi "github.com/hashicorp/nomad/api"
)

// tokensVariable is where the quota service job reads its tokens
// (jobspecs/quota-service.nomad.hcl, tokens_from_variable).
const tokensVariable = "nomad/jobs/gpushare-quota"

// storeServiceTokens makes the quota service's Nomad and Consul tokens from
// the shipped policies, acting in the projects' namespaces (each project's
// namespace is its name in the demo), and stores them in the job's Nomad
// Variable.
func storeServiceTokens(c *localcluster.Cluster, root string, projects []string) error {
	rules, err := aclpolicy.QuotaNomad(root, projects)
	if err != nil {
		return err
	}
	nomadToken, err := c.CreateNomadToken("gpushare-quota", rules)
	if err != nil {
		return err
	}
	consulRules, err := aclpolicy.Read(root, aclpolicy.QuotaConsul)
	if err != nil {
		return err
	}
	consulToken, err := c.CreateConsulToken("gpushare-quota", consulRules)
	if err != nil {
		return err
	}
	v := &nomadapi.Variable{Namespace: "default", Path: tokensVariable,
		Items: nomadapi.VariableItems{"nomad_token": nomadToken, "consul_token": consulToken}}
	if _, _, err := c.Nomad.Variables().Create(v, nil); err != nil {
		return fmt.Errorf("storing the quota service's tokens at %s: %w", tokensVariable, err)
	}
	return nil
}
