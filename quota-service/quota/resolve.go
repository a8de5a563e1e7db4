package quota

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/gpushare/nomad-gpushare/quota-service/kvlayout"
	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// inForce is the set of settings the service plans with: every project's
// and department's, consistent (each department a project names is in
// force, and a department's projects' guarantees fit in its own).
type inForce struct {
	projects    map[string]Settings
	departments map[string]Department
}

// resolution is what resolve decided from the documents.
type resolution struct {
	inForce
	// projectErrs are the projects whose document is not taken, and why;
	// departmentErrs the departments whose document is not taken, or
	// whose projects' guarantees do not fit in its own, or that are kept
	// in force after their document was deleted.
	projectErrs    map[string]*FieldError
	departmentErrs map[string]*FieldError
}

// resolve decides the settings in force from the latest documents
// (projects and departments by name) and the settings in force before
// (prev, consistent). It reads nothing else, so the outcome does not depend
// on the order the documents were written in: once the documents are
// consistent they are all in force. Until then:
//
//   - a document that does not parse is not taken: its last good settings
//     stay in force (none: not in force);
//   - a project naming a department whose document is missing, or that
//     never had a valid one, is not taken (last good kept);
//   - a department whose projects' guarantees add up above its own is not
//     taken, nor are the changed documents of its projects (last good
//     kept, the error reported for the department);
//   - a department whose document was deleted stays in force with its last
//     good settings while projects in force still name it.
func resolve(layout kvlayout.Layout, projectDocs, departmentDocs map[string][]byte, prev inForce) resolution {
	r := resolution{inForce: inForce{projects: map[string]Settings{}, departments: map[string]Department{}},
		projectErrs: map[string]*FieldError{}, departmentErrs: map[string]*FieldError{}}
	// fromDoc marks what is proposed from its current document (else it
	// is the last good settings).
	projectFromDoc, departmentFromDoc := map[string]bool{}, map[string]bool{}
	// joinable are the departments a project's document may name: those
	// with a document and settings in force from it, now or last.
	joinable := map[string]bool{}
	for _, name := range sortedKeys(departmentDocs) {
		d, err := ParseDepartment(name, departmentDocs[name])
		if err == nil {
			r.departments[name], departmentFromDoc[name], joinable[name] = d, true, true
			continue
		}
		r.departmentErrs[name] = asFieldError(name, true, err)
		if old, ok := prev.departments[name]; ok {
			r.departments[name], joinable[name] = old, true
		}
	}
	for _, name := range sortedKeys(projectDocs) {
		s, err := Parse(name, projectDocs[name])
		if err == nil {
			r.projects[name], projectFromDoc[name] = s, true
			continue
		}
		r.projectErrs[name] = asFieldError(name, false, err)
		if old, ok := prev.projects[name]; ok {
			r.projects[name] = old
		}
	}
	revertProject := func(name string) {
		projectFromDoc[name] = false
		if old, ok := prev.projects[name]; ok {
			r.projects[name] = old
		} else {
			delete(r.projects, name)
		}
	}
	for changed := true; changed; {
		changed = false
		// Every department named must be in force.
		for _, name := range sortedKeys(r.projects) {
			s := r.projects[name]
			dep := s.Department
			if dep == "" {
				continue
			}
			if projectFromDoc[name] && !joinable[dep] {
				r.projectErrs[name] = &FieldError{Project: name, Field: "department", Problem: unknownDepartment(dep, departmentDocs, prev),
					Fix: fmt.Sprintf("store the department's document at %s first, name another department, or remove \"department\" for a project on its own", layout.Department(dep))}
				revertProject(name)
				changed = true
				continue
			}
			if _, ok := r.departments[dep]; ok {
				continue
			}
			// The last good settings name a department whose document
			// was deleted: it stays in force while they name it.
			old, ok := prev.departments[dep]
			if !ok {
				delete(r.projects, name) // prev was not consistent; not reached
				changed = true
				continue
			}
			r.departments[dep] = old
			changed = true
		}
		// Each department's projects' guarantees fit in its own.
		members := map[string][]string{}
		for _, name := range sortedKeys(r.projects) {
			if dep := r.projects[name].Department; dep != "" {
				members[dep] = append(members[dep], name)
			}
		}
		for _, dep := range sortedKeys(r.departments) {
			d := r.departments[dep]
			var sum cluster.Shares
			parts := make([]string, 0, len(members[dep]))
			for _, p := range members[dep] {
				sum += r.projects[p].Guaranteed
				parts = append(parts, fmt.Sprintf("%s %s", p, r.projects[p].Guaranteed))
			}
			if sum <= d.Guaranteed {
				continue
			}
			reverted := false
			var held []string
			if departmentFromDoc[dep] {
				departmentFromDoc[dep] = false
				if old, ok := prev.departments[dep]; ok {
					r.departments[dep] = old
				} else {
					delete(r.departments, dep)
				}
				reverted = true
			}
			for _, p := range members[dep] {
				if old, ok := prev.projects[p]; projectFromDoc[p] && (!ok || old != r.projects[p]) {
					revertProject(p)
					held = append(held, p)
					reverted = true
				}
			}
			if !reverted {
				continue // all at their last good settings already
			}
			changed = true
			problem := fmt.Sprintf("its projects' guarantees add up to %s (%s), above the department's guarantee %s", sum, strings.Join(parts, ", "), d.Guaranteed)
			fix := fmt.Sprintf("raise the department's \"guaranteed\" to at least %s or lower its projects' guarantees; until then the department keeps its last good settings", sum)
			if len(held) > 0 {
				fix = fmt.Sprintf("raise the department's \"guaranteed\" to at least %s or lower its projects' guarantees; until then the department and the changed projects (%s) keep their last good settings",
					sum, strings.Join(held, ", "))
			}
			if _, parseErr := r.departmentErrs[dep]; !parseErr {
				r.departmentErrs[dep] = &FieldError{Project: dep, Department: true, Field: "guaranteed", Problem: problem, Fix: fix}
			}
			for _, p := range held {
				r.projectErrs[p] = &FieldError{Project: p, Field: "guaranteed",
					Problem: fmt.Sprintf("in department %q %s (reported at %s)", dep, problem, layout.DepartmentError(dep)), Fix: fix}
			}
		}
	}
	// A department kept in force only because projects name it says so.
	for _, dep := range sortedKeys(r.departments) {
		if _, ok := departmentDocs[dep]; ok {
			continue
		}
		var naming []string
		for _, name := range sortedKeys(r.projects) {
			if r.projects[name].Department == dep {
				naming = append(naming, name)
			}
		}
		r.departmentErrs[dep] = &FieldError{Project: dep, Department: true,
			Problem: fmt.Sprintf("document deleted while projects %s still name it; its last good settings stay in force for them", strings.Join(naming, ", ")),
			Fix:     fmt.Sprintf("remove \"department\": %q from those projects' documents (or name another department), or store the department's document at %s again", dep, layout.Department(dep))}
	}
	return r
}

// unknownDepartment says why a department cannot be joined.
func unknownDepartment(dep string, departmentDocs map[string][]byte, prev inForce) string {
	if _, ok := departmentDocs[dep]; ok {
		return fmt.Sprintf("department %q has no settings in force: its document is rejected and none was ever valid", dep)
	}
	if _, ok := prev.departments[dep]; ok {
		return fmt.Sprintf("unknown department %q: its document was deleted", dep)
	}
	return fmt.Sprintf("unknown department %q: it has no document", dep)
}

// asFieldError makes err a *FieldError of name.
func asFieldError(name string, department bool, err error) *FieldError {
	var fe *FieldError
	if !errors.As(err, &fe) {
		fe = &FieldError{Project: name, Department: department, Problem: err.Error(), Fix: "correct the document"}
	}
	return fe
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
