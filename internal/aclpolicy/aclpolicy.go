// Package aclpolicy reads the ACL policies the project ships in
// jobspecs/acl, for the demo and the tests that run with ACLs on, and
// assembles the quota service's Nomad policy the way its files say
// (terraform/modules/gpushare does the same in HCL): the rules it needs in
// every namespace, then the project block once per project namespace.
package aclpolicy

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The policy files, relative to the repository root.
const (
	PluginNomad     = "jobspecs/acl/nomad-gpushare-plugin.policy.hcl"
	QuotaNomadWatch = "jobspecs/acl/nomad-gpushare-quota.policy.hcl"
	QuotaNomadProj  = "jobspecs/acl/nomad-gpushare-quota-project.policy.hcl"
	QuotaConsul     = "jobspecs/acl/consul-gpushare-quota.policy.hcl"
	PeopleConsul    = "jobspecs/acl/people-quota-admin.consul.policy.hcl"
	namespaceMarker = "<namespace>"
)

// Read returns the policy file name (one of the constants) of the
// repository at root.
func Read(root, name string) (string, error) {
	data, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		return "", fmt.Errorf("reading the shipped ACL policy: %w", err)
	}
	return string(data), nil
}

// QuotaNomad returns the quota service's Nomad policy for the given
// project namespaces.
func QuotaNomad(root string, namespaces []string) (string, error) {
	rules, err := Read(root, QuotaNomadWatch)
	if err != nil {
		return "", err
	}
	project, err := Read(root, QuotaNomadProj)
	if err != nil {
		return "", err
	}
	if !strings.Contains(project, namespaceMarker) {
		return "", fmt.Errorf("%s has no %s to replace with a namespace", QuotaNomadProj, namespaceMarker)
	}
	for _, ns := range namespaces {
		rules += "\n" + strings.ReplaceAll(project, namespaceMarker, ns)
	}
	return rules, nil
}
