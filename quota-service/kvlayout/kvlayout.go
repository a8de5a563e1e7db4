// Package kvlayout names the Consul KV keys of the quota service, all under
// one root prefix, so that every package agrees on them and a person
// browsing the Consul UI finds one folder per concern.
package kvlayout

import (
	"fmt"
	"strings"
)

// DefaultRoot is the root prefix when none is configured.
const DefaultRoot = "gpushare"

// Layout derives keys from a root prefix (no leading or trailing slash).
type Layout struct {
	Root string
}

// New returns the layout for root; an empty root means DefaultRoot. Leading
// and trailing slashes are dropped.
func New(root string) Layout {
	root = strings.Trim(root, "/")
	if root == "" {
		root = DefaultRoot
	}
	return Layout{Root: root}
}

// Quotas is the folder of project quota documents, with a trailing slash.
func (l Layout) Quotas() string { return l.Root + "/quotas/" }

// Quota is the key of one project's quota document.
func (l Layout) Quota(project string) string { return l.Quotas() + project }

// Departments is the folder of department documents, with a trailing
// slash.
func (l Layout) Departments() string { return l.Root + "/departments/" }

// Department is the key of one department's document.
func (l Layout) Department(name string) string { return l.Departments() + name }

// QuotaErrors is the folder of rejected-document reports.
func (l Layout) QuotaErrors() string { return l.Root + "/status/quota-errors/" }

// QuotaError is the key reporting why project's document is rejected.
func (l Layout) QuotaError(project string) string { return l.QuotaErrors() + project }

// DepartmentErrors is the folder of reports on departments: a rejected
// department document, or a department whose projects' guarantees do not
// fit in its own. A subfolder of QuotaErrors: project names hold no '/',
// so its keys never meet a project's.
func (l Layout) DepartmentErrors() string { return l.QuotaErrors() + "departments/" }

// DepartmentError is the key reporting why department's settings (or its
// projects') are not taken.
func (l Layout) DepartmentError(department string) string { return l.DepartmentErrors() + department }

// RecordErrors is the folder of reports on suspension records the
// service does not act on.
func (l Layout) RecordErrors() string { return l.Root + "/status/record-errors/" }

// RecordError is the key reporting why the record of job in namespace is
// not acted on.
func (l Layout) RecordError(namespace, job string) string {
	return fmt.Sprintf("%s%s/%s", l.RecordErrors(), namespace, job)
}

// ProjectStatuses is the folder of per-project status documents.
func (l Layout) ProjectStatuses() string { return l.Root + "/status/projects/" }

// ProjectStatus is the key of one project's status document.
func (l Layout) ProjectStatus(project string) string { return l.ProjectStatuses() + project }

// Suspended is the folder of suspension records.
func (l Layout) Suspended() string { return l.Root + "/suspended/" }

// Suspension is the key of the record for job in namespace.
func (l Layout) Suspension(namespace, job string) string {
	return fmt.Sprintf("%s%s/%s", l.Suspended(), namespace, job)
}

// SurplusUse is the key of the projects' recent use of the surplus
// (time-aware fair share, package surplususe).
func (l Layout) SurplusUse() string { return l.Root + "/status/surplus-use" }

// Shrunk is the folder of shrink records (elastic groups the service
// shrank).
func (l Layout) Shrunk() string { return l.Root + "/shrunk/" }

// ShrinkRecord is the key of the shrink record for job in namespace.
func (l Layout) ShrinkRecord(namespace, job string) string {
	return fmt.Sprintf("%s%s/%s", l.Shrunk(), namespace, job)
}

// History is the folder of history entries.
func (l Layout) History() string { return l.Root + "/history/" }

// Leader is the key of the leader lock.
func (l Layout) Leader() string { return l.Root + "/leader" }
