package localcluster

import (
	"crypto/rand"
	"errors"
	"fmt"
	"strings"

	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"
)

// The agents' own Consul rights with ACLs on: the Consul agent registers
// its node and syncs the checks of the services registered with it; Nomad
// registers its agents and the jobs' services and reads the agent it
// talks to.
const (
	consulAgentRules = `
node_prefix "" { policy = "write" }
service_prefix "" { policy = "read" }
`
	nomadConsulRules = `
agent_prefix "" { policy = "read" }
node_prefix "" { policy = "read" }
service_prefix "" { policy = "write" }
`
)

// aclSecrets are the secrets chosen before the agents start: Consul takes
// its management and agent tokens from its configuration, and Nomad's
// Consul token is created in Consul with the secret its configuration
// names.
type aclSecrets struct {
	consulManagement, consulAgent, nomadConsul, nomadManagement string
}

func newACLSecrets() (aclSecrets, error) {
	var s aclSecrets
	for _, p := range []*string{&s.consulManagement, &s.consulAgent, &s.nomadConsul, &s.nomadManagement} {
		id, err := newSecret()
		if err != nil {
			return s, err
		}
		*p = id
	}
	return s, nil
}

// newSecret returns a random UUID, the form both agents use for secrets.
func newSecret() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating a token secret: %w", err)
	}
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:]), nil
}

// consulACLConfig is the Consul agent's acl block: default deny, the
// management token for the cluster's client, the agent's own token.
func (s aclSecrets) consulACLConfig() string {
	return fmt.Sprintf(`
acl {
  enabled = true
  default_policy = "deny"
  enable_token_persistence = true
  tokens {
    initial_management = %q
    agent = %q
  }
}
`, s.consulManagement, s.consulAgent)
}

// consulAgentTokens creates the Consul agent's token and Nomad's Consul
// token with the secrets the agents' configurations name. It is a no-op
// when they exist (a restarted Consul keeps them).
func consulAgentTokens(client *consulapi.Client, s aclSecrets) error {
	for _, t := range []struct{ name, rules, secret string }{
		{"consul-agent", consulAgentRules, s.consulAgent},
		{"nomad-agents", nomadConsulRules, s.nomadConsul},
	} {
		if existing, _, err := client.ACL().TokenReadSelf(&consulapi.QueryOptions{Token: t.secret}); err == nil && existing != nil {
			continue
		}
		policy, _, err := client.ACL().PolicyCreate(&consulapi.ACLPolicy{Name: t.name, Rules: t.rules}, nil)
		if err != nil {
			return fmt.Errorf("creating the Consul policy %s: %w", t.name, err)
		}
		token := &consulapi.ACLToken{SecretID: t.secret, Description: t.name,
			Policies: []*consulapi.ACLTokenPolicyLink{{ID: policy.ID}}}
		if _, _, err := client.ACL().TokenCreate(token, nil); err != nil {
			return fmt.Errorf("creating the Consul token %s: %w", t.name, err)
		}
	}
	return nil
}

// bootstrapNomad bootstraps Nomad's ACLs with the chosen management
// secret; a Nomad that was bootstrapped before (a restart) is fine.
func bootstrapNomad(client *nomadapi.Client, secret string) error {
	_, _, err := client.ACLTokens().BootstrapOpts(secret, nil)
	if err != nil && !strings.Contains(err.Error(), "bootstrap already done") {
		return fmt.Errorf("bootstrapping Nomad ACLs: %w", err)
	}
	client.SetSecretID(secret)
	return nil
}

// CreateNomadToken creates the Nomad ACL policy name with rules (HCL) and a
// client token holding only that policy, and returns the token's secret.
func (c *Cluster) CreateNomadToken(name, rules string) (string, error) {
	if c.NomadToken == "" {
		return "", errors.New("the cluster runs without ACLs: no token to create")
	}
	policy := &nomadapi.ACLPolicy{Name: name, Description: "gpushare test cluster", Rules: rules}
	if _, err := c.Nomad.ACLPolicies().Upsert(policy, nil); err != nil {
		return "", fmt.Errorf("creating the Nomad policy %s: %w", name, err)
	}
	token, _, err := c.Nomad.ACLTokens().Create(&nomadapi.ACLToken{Name: name, Type: "client", Policies: []string{name}}, nil)
	if err != nil {
		return "", fmt.Errorf("creating a Nomad token for policy %s: %w", name, err)
	}
	return token.SecretID, nil
}

// CreateConsulToken creates the Consul ACL policy name with rules (HCL) and
// a token holding only that policy, and returns the token's secret.
func (c *Cluster) CreateConsulToken(name, rules string) (string, error) {
	if c.ConsulToken == "" {
		return "", errors.New("the cluster runs without ACLs: no token to create")
	}
	policy, _, err := c.Consul.ACL().PolicyCreate(&consulapi.ACLPolicy{Name: name, Rules: rules}, nil)
	if err != nil {
		return "", fmt.Errorf("creating the Consul policy %s: %w", name, err)
	}
	token, _, err := c.Consul.ACL().TokenCreate(&consulapi.ACLToken{Description: name,
		Policies: []*consulapi.ACLTokenPolicyLink{{ID: policy.ID}}}, nil)
	if err != nil {
		return "", fmt.Errorf("creating a Consul token for policy %s: %w", name, err)
	}
	return token.SecretID, nil
}

// consulACLConfig is the Consul agent's acl block, empty without ACLs.
func (c *Cluster) consulACLConfig() string {
	if !c.opts.ACL {
		return ""
	}
	return c.acl.consulACLConfig()
}
