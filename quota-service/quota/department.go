package quota

import (
	"encoding/json"
	"fmt"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// A department groups projects one level up. One JSON document per
// department lives at <root>/departments/<name>:
//
//	{
//	  "guaranteed": 8,              // GPUs, at most two decimals (required); its projects' guarantees fit within it
//	  "limit": 12,                  // hard cap in GPUs for all its projects together (optional, >= guaranteed)
//	  "priority": 10,               // higher wins over-quota capacity between departments (default 0)
//	  "over_quota_weight": 2        // split of over-quota capacity between departments (default 1; 0: no share of it)
//	}
//
// A project joins a department with "department": "<name>" in its own
// document. Departments do not nest: a department document that names a
// department (or a parent) is rejected.

// Department is one department's settings with defaults applied.
type Department struct {
	Name            string         `json:"name"`
	Guaranteed      cluster.Shares `json:"guaranteed_shares"`
	Limit           cluster.Shares `json:"limit_shares,omitempty"`
	HasLimit        bool           `json:"has_limit"`
	Priority        int            `json:"priority"`
	OverQuotaWeight int64          `json:"over_quota_weight"`
}

// Model returns the department as the planner's record
// (cluster.Snapshot.Departments).
func (d Department) Model() cluster.Project {
	return cluster.Project{
		Name:            d.Name,
		Guaranteed:      d.Guaranteed,
		Limit:           d.Limit,
		HasLimit:        d.HasLimit,
		Priority:        d.Priority,
		OverQuotaWeight: d.OverQuotaWeight,
		NoOverQuota:     d.OverQuotaWeight == 0,
	}
}

// departmentDocument is the wire form. Department and Parent are read
// only to say that departments do not nest.
type departmentDocument struct {
	Guaranteed      json.RawMessage `json:"guaranteed"`
	Limit           json.RawMessage `json:"limit"`
	Priority        json.RawMessage `json:"priority"`
	OverQuotaWeight json.RawMessage `json:"over_quota_weight"`
	Department      json.RawMessage `json:"department"`
	Parent          json.RawMessage `json:"parent"`
}

// departmentFields lists a department document's fields for error
// messages.
const departmentFields = "guaranteed, limit, priority and over_quota_weight (a department has no min_runtime, mapping or department: those belong to its projects)"

// ParseDepartment reads and validates the document of department name.
// Errors are *FieldError with Department set.
func ParseDepartment(name string, data []byte) (Department, error) {
	fe := func(field, problem, fix string) error {
		return &FieldError{Project: name, Department: true, Field: field, Problem: problem, Fix: fix}
	}
	if !projectRE.MatchString(name) {
		return Department{}, fe("", "the department name (the key below the departments folder) is empty, too long, nested or has characters other than letters, digits, '.', '-' and '_'",
			`store the document directly under the departments folder with a name like "research"`)
	}
	var doc departmentDocument
	if trailing, err := decodeOne(data, &doc); err != nil {
		return Department{}, decodeErrorOf(&FieldError{Project: name, Department: true}, departmentFields, err)
	} else if trailing {
		return Department{}, fe("", "data after the JSON object", "store exactly one JSON object")
	}
	for _, f := range []struct {
		field string
		raw   json.RawMessage
	}{{"department", doc.Department}, {"parent", doc.Parent}} {
		if field := f.field; f.raw != nil {
			return Department{}, fe(field, "departments do not nest: there is one level of departments above projects, and a department cannot belong to another",
				fmt.Sprintf(`remove %q; to group this department's projects with others, put them all in one department (each project's "department" field)`, field))
		}
	}
	c, err := parseCommon(commonFields{doc.Guaranteed, doc.Limit, doc.Priority, doc.OverQuotaWeight}, fe)
	if err != nil {
		return Department{}, err
	}
	return Department{Name: name, Guaranteed: c.Guaranteed, Limit: c.Limit, HasLimit: c.HasLimit, Priority: c.Priority, OverQuotaWeight: c.OverQuotaWeight}, nil
}
