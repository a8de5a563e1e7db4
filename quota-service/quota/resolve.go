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
	rs := &resolver{layout: layout, projectDocs: projectDocs, departmentDocs: departmentDocs, prev: prev,
		r: resolution{inForce: inForce{projects: map[string]Settings{}, departments: map[string]Department{}},
			projectErrs: map[string]*FieldError{}, departmentErrs: map[string]*FieldError{}},
		projectFromDoc: map[string]bool{}, departmentFromDoc: map[string]bool{}, joinable: map[string]bool{}}
	rs.parseDepartments()
	rs.parseProjects()
	for {
		named := rs.requireDepartments()
		fitted := rs.fitGuarantees()
		if !named && !fitted {
			break
		}
	}
	rs.reportKeptDepartments()
	return rs.r
}

// resolver is one run of resolve: the documents, the settings in force
// before, and what it proposes so far.
type resolver struct {
	layout                      kvlayout.Layout
	projectDocs, departmentDocs map[string][]byte
	prev                        inForce
	r                           resolution
	// projectFromDoc and departmentFromDoc mark what is proposed from its
	// current document (else it is the last good settings); joinable are
	// the departments a project's document may name: those with a
	// document and settings in force from it, now or last.
	projectFromDoc, departmentFromDoc, joinable map[string]bool
}

// parseDepartments proposes every department's document, or its last
// good settings when the document does not parse.
func (rs *resolver) parseDepartments() {
	r := &rs.r
	for _, name := range sortedKeys(rs.departmentDocs) {
		d, err := ParseDepartment(name, rs.departmentDocs[name])
		if err == nil {
			r.departments[name], rs.departmentFromDoc[name], rs.joinable[name] = d, true, true
			continue
		}
		r.departmentErrs[name] = asFieldError(name, true, err)
		if old, ok := rs.prev.departments[name]; ok {
			r.departments[name], rs.joinable[name] = old, true
		}
	}
}

// parseProjects proposes every project's document, or its last good
// settings when the document does not parse.
func (rs *resolver) parseProjects() {
	r := &rs.r
	for _, name := range sortedKeys(rs.projectDocs) {
		s, err := Parse(name, rs.projectDocs[name])
		if err == nil {
			r.projects[name], rs.projectFromDoc[name] = s, true
			continue
		}
		r.projectErrs[name] = asFieldError(name, false, err)
		if old, ok := rs.prev.projects[name]; ok {
			r.projects[name] = old
		}
	}
}

// revertProject puts project name back to its last good settings (out of
// force when it has none).
func (rs *resolver) revertProject(name string) {
	rs.projectFromDoc[name] = false
	if old, ok := rs.prev.projects[name]; ok {
		rs.r.projects[name] = old
	} else {
		delete(rs.r.projects, name)
	}
}

// requireDepartments keeps in force every department a proposed project
// names: a project's document naming a department that cannot be joined
// is not taken, and a department whose document was deleted stays in
// force with its last good settings while last good settings name it. It
// reports whether it changed anything.
func (rs *resolver) requireDepartments() bool {
	r := &rs.r
	changed := false
	for _, name := range sortedKeys(r.projects) {
		dep := r.projects[name].Department
		if dep == "" {
			continue
		}
		if rs.projectFromDoc[name] && !rs.joinable[dep] {
			r.projectErrs[name] = &FieldError{Project: name, Field: "department", Problem: unknownDepartment(dep, rs.departmentDocs, rs.prev),
				Fix: fmt.Sprintf("store the department's document at %s first, name another department, or remove \"department\" for a project on its own", rs.layout.Department(dep))}
			rs.revertProject(name)
			changed = true
			continue
		}
		if _, ok := r.departments[dep]; ok {
			continue
		}
		old, ok := rs.prev.departments[dep]
		if !ok {
			delete(r.projects, name) // prev was not consistent; not reached
			changed = true
			continue
		}
		r.departments[dep] = old
		changed = true
	}
	return changed
}

// fitGuarantees holds back, for every department whose projects'
// guarantees add up above its own, the department's document and its
// projects' changed documents (last good settings kept), and reports the
// error for the department and those projects. It reports whether it
// changed anything.
func (rs *resolver) fitGuarantees() bool {
	r := &rs.r
	members := map[string][]string{}
	for _, name := range sortedKeys(r.projects) {
		if dep := r.projects[name].Department; dep != "" {
			members[dep] = append(members[dep], name)
		}
	}
	changed := false
	for _, dep := range sortedKeys(r.departments) {
		sum, parts := rs.guaranteesOf(members[dep])
		if d := r.departments[dep]; sum > d.Guaranteed && rs.holdBack(dep, members[dep], sum, parts, d.Guaranteed) {
			changed = true
		}
	}
	return changed
}

// guaranteesOf adds up the projects' guarantees, and lists them for
// errors.
func (rs *resolver) guaranteesOf(projects []string) (cluster.Shares, []string) {
	var sum cluster.Shares
	parts := make([]string, 0, len(projects))
	for _, p := range projects {
		sum += rs.r.projects[p].Guaranteed
		parts = append(parts, fmt.Sprintf("%s %s", p, rs.r.projects[p].Guaranteed))
	}
	return sum, parts
}

// holdBack reverts department dep and its changed projects to their last
// good settings, as their guarantees (sum) do not fit in dep's, and
// reports why. It reports whether it reverted anything.
func (rs *resolver) holdBack(dep string, members []string, sum cluster.Shares, parts []string, guaranteed cluster.Shares) bool {
	r := &rs.r
	reverted := false
	if rs.departmentFromDoc[dep] {
		rs.departmentFromDoc[dep] = false
		if old, ok := rs.prev.departments[dep]; ok {
			r.departments[dep] = old
		} else {
			delete(r.departments, dep)
		}
		reverted = true
	}
	var held []string
	for _, p := range members {
		if old, ok := rs.prev.projects[p]; rs.projectFromDoc[p] && (!ok || old != r.projects[p]) {
			rs.revertProject(p)
			held = append(held, p)
			reverted = true
		}
	}
	if !reverted {
		return false // all at their last good settings already
	}
	problem := fmt.Sprintf("its projects' guarantees add up to %s (%s), above the department's guarantee %s", sum, strings.Join(parts, ", "), guaranteed)
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
			Problem: fmt.Sprintf("in department %q %s (reported at %s)", dep, problem, rs.layout.DepartmentError(dep)), Fix: fix}
	}
	return true
}

// reportKeptDepartments reports every department kept in force only
// because projects name it.
func (rs *resolver) reportKeptDepartments() {
	r := &rs.r
	for _, dep := range sortedKeys(r.departments) {
		if _, ok := rs.departmentDocs[dep]; ok {
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
			Fix:     fmt.Sprintf("remove \"department\": %q from those projects' documents (or name another department), or store the department's document at %s again", dep, rs.layout.Department(dep))}
	}
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
