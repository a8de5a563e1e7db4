// Package aclview tells whether a Nomad ACL token sees every allocation of a
// node. Nomad's list endpoints, /v1/node/:id/allocations among them,
// silently leave out the allocations of namespaces the token cannot read
// (read-job), so a list is proof of absence only for a token that can read
// every namespace, including namespaces created later.
//
// The check does not depend on what the token can see: it reads the token
// itself (/v1/acl/token/self) and the rules of its policies, directly
// linked or through roles (/v1/acl/policy/self, then /v1/acl/policy/:name,
// which Nomad lets a token read for its own policies), parses them with
// Nomad's own policy parser, and evaluates them the way Nomad merges them
// (see Evaluate). A view is complete when ACLs are disabled, for a
// management token, or when the policies grant read-job to every namespace.
//
// Comparing allocation counts with the client agent's own metrics
// (/v1/metrics, nomad.client.allocations.*) was considered and rejected:
// the in-memory sink reports the previous 10 s interval, and the client
// counts the allocation runners it holds (terminal ones until GC) while the
// servers list allocations not yet pulled, so equal counts neither prove
// nor disprove that the list is complete.
package aclview

import (
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/nomad/acl"
	"github.com/hashicorp/nomad/api"
)

// PolicyFile is the least-privilege policy shipped for the plugin, named in
// every verdict that finds the token short.
const PolicyFile = "jobspecs/acl/nomad-gpushare-plugin.policy.hcl"

// Verdict says whether a token sees every allocation.
type Verdict struct {
	// Complete is set when nothing can be hidden from the token.
	Complete bool
	// Reason says why it is complete, or what the token lacks and how to
	// fix it.
	Reason string
}

// Policy is one ACL policy of a token: its name and its parsed rules.
type Policy struct {
	Name  string
	Rules *acl.Policy
}

// Evaluate decides whether a client token with these policies can read
// jobs (read-job) in every namespace. Nomad gives a namespace the merged
// capabilities of the exact rule of that name, or else of the closest
// matching glob rule; rules of the same name in several policies merge,
// and deny overrides everything else. So every namespace is readable when
// a rule "*" exists and every rule, exact or glob, merges to a set that
// grants read-job: whichever rule Nomad picks for a namespace, it grants
// it. A rule that would never match an existing namespace still counts:
// the verdict errs on the side of "incomplete".
func Evaluate(policies []Policy) Verdict {
	rules := mergeNamespaceRules(policies)
	var lacks []string
	if _, ok := rules["*"]; !ok {
		lacks = append(lacks, `no namespace "*" rule`)
	}
	for _, name := range sortedNames(rules) {
		r := rules[name]
		switch {
		case r.deny:
			lacks = append(lacks, fmt.Sprintf("namespace %q is denied (policy %s)", name, strings.Join(r.from, ", ")))
		case !r.caps[acl.NamespaceCapabilityReadJob]:
			lacks = append(lacks, fmt.Sprintf("namespace %q lacks read-job (policy %s)", name, strings.Join(r.from, ", ")))
		}
	}
	if len(lacks) == 0 {
		return Verdict{Complete: true, Reason: `the token's policies grant read-job in every namespace`}
	}
	return Verdict{Reason: fmt.Sprintf("the Nomad token cannot read every namespace (%s), so allocations of other namespaces may be hidden; "+
		`grant it read-job in namespace "*", e.g. with the policy %s`, strings.Join(lacks, "; "), PolicyFile)}
}

// mergedRule is the merged capability set of all rules of one name.
type mergedRule struct {
	caps map[string]bool
	deny bool
	from []string // policy names
}

// mergeNamespaceRules merges the namespace rules of the policies by name,
// as Nomad's acl.NewACL does.
func mergeNamespaceRules(policies []Policy) map[string]*mergedRule {
	rules := map[string]*mergedRule{}
	for _, p := range policies {
		if p.Rules == nil {
			continue
		}
		for _, ns := range p.Rules.Namespaces {
			if ns == nil {
				continue
			}
			r := rules[ns.Name]
			if r == nil {
				r = &mergedRule{caps: map[string]bool{}}
				rules[ns.Name] = r
			}
			r.from = append(r.from, p.Name)
			for _, c := range ns.Capabilities {
				if c == acl.NamespaceCapabilityDeny {
					r.deny = true
				}
				r.caps[c] = true
			}
		}
	}
	return rules
}

func sortedNames(m map[string]*mergedRule) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Checker checks the token of a Nomad API client on every call: the token
// itself (a swapped token, a token turned management) and the list of its
// policies with their modify indexes are read each time; a policy's rules
// are read and parsed again only when its index changed. So a policy
// narrowed or a role changed is noticed at the next check, for two small
// requests. It is not safe for concurrent use.
type Checker struct {
	client *api.Client
	// rules caches parsed policies by name.
	rules map[string]cachedPolicy
}

type cachedPolicy struct {
	modifyIndex uint64
	rules       *acl.Policy
}

// NewChecker checks the token of client.
func NewChecker(client *api.Client) *Checker {
	return &Checker{client: client, rules: map[string]cachedPolicy{}}
}

// Check returns the verdict on the token (q carries the context). When the
// token or its policies cannot be read, the verdict is incomplete and says
// why.
func (c *Checker) Check(q *api.QueryOptions) Verdict {
	v, err := c.check(q)
	if err != nil {
		return Verdict{Reason: fmt.Sprintf("cannot check what the Nomad token may read (%v), so allocations may be hidden from it", err)}
	}
	return v
}

// check reads the token, then its policies.
func (c *Checker) check(q *api.QueryOptions) (Verdict, error) {
	tok, _, err := c.client.ACLTokens().Self(q)
	switch {
	case aclsDisabled(err) || err == nil && tok.AccessorID == "acls-disabled":
		return Verdict{Complete: true, Reason: "ACLs are disabled"}, nil
	case err != nil:
		return Verdict{}, fmt.Errorf("reading the token (/v1/acl/token/self): %w", err)
	case tok.Type == "management":
		return Verdict{Complete: true, Reason: "management token"}, nil
	}
	stubs, _, err := c.client.ACLPolicies().Self(q)
	if err != nil {
		return Verdict{}, fmt.Errorf("listing the token's policies (/v1/acl/policy/self): %w", err)
	}
	policies := make([]Policy, 0, len(stubs))
	fresh := make(map[string]cachedPolicy, len(stubs))
	for _, s := range stubs {
		cp, ok := c.rules[s.Name]
		if !ok || cp.modifyIndex != s.ModifyIndex {
			if cp, err = c.readPolicy(s.Name, q); err != nil {
				return Verdict{}, err
			}
		}
		fresh[s.Name] = cp
		policies = append(policies, Policy{Name: s.Name, Rules: cp.rules})
	}
	c.rules = fresh
	return Evaluate(policies), nil
}

// readPolicy reads and parses one policy.
func (c *Checker) readPolicy(name string, q *api.QueryOptions) (cachedPolicy, error) {
	p, _, err := c.client.ACLPolicies().Info(name, q)
	if err != nil {
		return cachedPolicy{}, fmt.Errorf("reading policy %q: %w", name, err)
	}
	rules, err := acl.Parse(p.Rules, acl.PolicyParseLenient)
	if err != nil {
		return cachedPolicy{}, fmt.Errorf("parsing policy %q: %w", name, err)
	}
	return cachedPolicy{modifyIndex: p.ModifyIndex, rules: rules}, nil
}

// aclsDisabled recognizes the answer of a Nomad whose ACLs are off on
// older versions (400 "ACL support disabled"; v1.11 returns the
// "acls-disabled" token instead).
func aclsDisabled(err error) bool {
	return err != nil && strings.Contains(err.Error(), "ACL support disabled")
}
