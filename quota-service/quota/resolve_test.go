package quota

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/gpushare/nomad-gpushare/quota-service/kvlayout"
)

// docs is what the two folders hold at one moment.
type docs struct {
	projects, departments map[string]string
}

func (d docs) bytes() (map[string][]byte, map[string][]byte) {
	conv := func(m map[string]string) map[string][]byte {
		out := map[string][]byte{}
		for k, v := range m {
			out[k] = []byte(v)
		}
		return out
	}
	return conv(d.projects), conv(d.departments)
}

// summary writes the settings in force and the errors short: a project
// as "2.00" or "2.00@dept", a department as its guarantee, an error by
// "project:" or "department:" and its name.
type summary struct {
	projects, departments map[string]string
	errs                  map[string]string
}

func summarize(r resolution) summary {
	s := summary{projects: map[string]string{}, departments: map[string]string{}, errs: map[string]string{}}
	for n, p := range r.projects {
		s.projects[n] = p.Guaranteed.String()
		if p.Department != "" {
			s.projects[n] += "@" + p.Department
		}
	}
	for n, d := range r.departments {
		s.departments[n] = d.Guaranteed.String()
	}
	for n, e := range r.projectErrs {
		s.errs["project:"+n] = e.Error()
	}
	for n, e := range r.departmentErrs {
		s.errs["department:"+n] = e.Error()
	}
	return s
}

// runSteps resolves each step's documents after the previous one's.
func runSteps(steps []docs) resolution {
	layout := kvlayout.New("t")
	r := resolution{inForce: inForce{projects: map[string]Settings{}, departments: map[string]Department{}}}
	for _, st := range steps {
		p, d := st.bytes()
		r = resolve(layout, p, d, r.inForce)
	}
	return r
}

func TestResolveDepartments(t *testing.T) {
	research := func(g string) string { return `{"guaranteed": ` + g + `}` }
	in := func(g, dep string) string { return `{"guaranteed": ` + g + `, "department": "` + dep + `"}` }
	consistent := docs{
		projects:    map[string]string{"ml": in("3", "research"), "vision": in("1", "research"), "ops": `{"guaranteed": 1}`},
		departments: map[string]string{"research": research("4")},
	}
	tests := []struct {
		name  string
		steps []docs
		// want: settings in force; errs: each error's text holds every
		// listed fragment; any other error fails.
		projects, departments map[string]string
		errs                  map[string][]string
	}{
		{name: "a department and its projects in force",
			steps:       []docs{consistent},
			projects:    map[string]string{"ml": "3.00@research", "vision": "1.00@research", "ops": "1.00"},
			departments: map[string]string{"research": "4.00"}},
		{name: "a project naming a department with no document is not taken",
			steps:    []docs{{projects: map[string]string{"ml": in("1", "nowhere")}}},
			projects: map[string]string{},
			errs:     map[string][]string{"project:ml": {`field "department"`, `unknown department "nowhere"`, "has no document", "t/departments/nowhere"}}},
		{name: "a project moved into a department with no document keeps its last good settings",
			steps: []docs{
				{projects: map[string]string{"ml": `{"guaranteed": 1}`}},
				{projects: map[string]string{"ml": in("2", "nowhere")}}},
			projects: map[string]string{"ml": "1.00"},
			errs:     map[string][]string{"project:ml": {`unknown department "nowhere"`}}},
		{name: "a project naming a department whose document never parsed is not taken",
			steps:       []docs{{projects: map[string]string{"ml": in("1", "research")}, departments: map[string]string{"research": `{"guaranteed": "four"}`}}},
			projects:    map[string]string{},
			departments: map[string]string{},
			errs: map[string][]string{"project:ml": {"document is rejected and none was ever valid"},
				"department:research": {`department "research"`, `field "guaranteed"`}}},
		{name: "a department naming a department: departments do not nest",
			steps:       []docs{{projects: map[string]string{"ml": in("1", "research")}, departments: map[string]string{"research": `{"guaranteed": 4, "department": "org"}`}}},
			projects:    map[string]string{},
			departments: map[string]string{},
			errs: map[string][]string{"project:ml": {`department "research"`},
				"department:research": {"departments do not nest", "one level"}}},
		{name: "a new department smaller than its projects' guarantees is not taken, nor are they",
			steps:       []docs{{projects: map[string]string{"ml": in("3", "research"), "vision": in("2", "research"), "ops": `{"guaranteed": 1}`}, departments: map[string]string{"research": research("4")}}},
			projects:    map[string]string{"ops": "1.00"},
			departments: map[string]string{},
			errs: map[string][]string{
				"department:research": {"add up to 5.00", "ml 3.00", "vision 2.00", "above the department's guarantee 4.00", "at least 5.00", "(ml, vision)"},
				"project:ml":          {`in department "research"`, "t/status/quota-errors/departments/research"},
				"project:vision":      {`in department "research"`}}},
		{name: "a department lowered below its projects keeps its last good settings",
			steps:       []docs{consistent, {projects: consistent.projects, departments: map[string]string{"research": research("3")}}},
			projects:    map[string]string{"ml": "3.00@research", "vision": "1.00@research", "ops": "1.00"},
			departments: map[string]string{"research": "4.00"},
			errs:        map[string][]string{"department:research": {"add up to 4.00", "above the department's guarantee 3.00", "keeps its last good settings"}}},
		{name: "a project raised beyond its department keeps its last good settings, and so does the department",
			steps: []docs{consistent, {projects: map[string]string{"ml": in("4", "research"), "vision": in("1", "research"), "ops": `{"guaranteed": 1}`},
				departments: map[string]string{"research": research("4")}}},
			projects:    map[string]string{"ml": "3.00@research", "vision": "1.00@research", "ops": "1.00"},
			departments: map[string]string{"research": "4.00"},
			errs: map[string][]string{"department:research": {"add up to 5.00", "(ml)"},
				"project:ml": {"add up to 5.00"}}},
		{name: "a project moved out keeps its old department's sum, and the department into which it moves checks it",
			steps: []docs{
				{projects: map[string]string{"ml": in("3", "research"), "web": in("1", "product")},
					departments: map[string]string{"research": research("3"), "product": research("1")}},
				{projects: map[string]string{"ml": in("3", "product"), "web": in("1", "product")},
					departments: map[string]string{"research": research("3"), "product": research("1")}}},
			projects:    map[string]string{"ml": "3.00@research", "web": "1.00@product"},
			departments: map[string]string{"research": "3.00", "product": "1.00"},
			errs:        map[string][]string{"department:product": {"add up to 4.00"}, "project:ml": {`in department "product"`}}},
		{name: "shrinking a department and its projects converges once all are written (Terraform's order)",
			steps: []docs{consistent,
				{projects: consistent.projects, departments: map[string]string{"research": research("2")}},
				{projects: map[string]string{"ml": in("1", "research"), "vision": in("1", "research"), "ops": `{"guaranteed": 1}`}, departments: map[string]string{"research": research("2")}}},
			projects:    map[string]string{"ml": "1.00@research", "vision": "1.00@research", "ops": "1.00"},
			departments: map[string]string{"research": "2.00"}},
		{name: "deleting a department its projects still name: they are rejected, it stays for them",
			steps:       []docs{consistent, {projects: consistent.projects}},
			projects:    map[string]string{"ml": "3.00@research", "vision": "1.00@research", "ops": "1.00"},
			departments: map[string]string{"research": "4.00"},
			errs: map[string][]string{
				"project:ml":          {`unknown department "research": its document was deleted`},
				"project:vision":      {`unknown department "research": its document was deleted`},
				"department:research": {"document deleted while projects ml, vision still name it", "last good settings stay in force"}}},
		{name: "a deleted department goes once no project names it",
			steps: []docs{consistent, {projects: consistent.projects},
				{projects: map[string]string{"ml": `{"guaranteed": 3}`, "vision": `{"guaranteed": 1}`, "ops": `{"guaranteed": 1}`}}},
			projects:    map[string]string{"ml": "3.00", "vision": "1.00", "ops": "1.00"},
			departments: map[string]string{}},
		{name: "a project may not join a deleted department kept for others",
			steps:       []docs{consistent, {projects: map[string]string{"ml": in("3", "research"), "vision": in("1", "research"), "ops": in("0", "research")}}},
			projects:    map[string]string{"ml": "3.00@research", "vision": "1.00@research", "ops": "1.00"},
			departments: map[string]string{"research": "4.00"},
			errs: map[string][]string{
				"project:ml": {"deleted"}, "project:vision": {"deleted"}, "project:ops": {"deleted"},
				"department:research": {"ml, vision still name it"}}},
		{name: "a broken department document keeps its last good settings and its projects",
			steps:       []docs{consistent, {projects: consistent.projects, departments: map[string]string{"research": `{"guaranteed": 4, "min_runtime": "1m"}`}}},
			projects:    map[string]string{"ml": "3.00@research", "vision": "1.00@research", "ops": "1.00"},
			departments: map[string]string{"research": "4.00"},
			errs:        map[string][]string{"department:research": {`field "min_runtime"`, "unknown field"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := summarize(runSteps(tt.steps))
			if fmt.Sprint(got.projects) != fmt.Sprint(tt.projects) {
				t.Errorf("projects in force %v, want %v", got.projects, tt.projects)
			}
			if tt.departments == nil {
				tt.departments = map[string]string{}
			}
			if fmt.Sprint(got.departments) != fmt.Sprint(tt.departments) {
				t.Errorf("departments in force %v, want %v", got.departments, tt.departments)
			}
			for key, msg := range got.errs {
				frags, ok := tt.errs[key]
				if !ok {
					t.Errorf("unexpected error %s: %s", key, msg)
					continue
				}
				for _, f := range frags {
					if !strings.Contains(msg, f) {
						t.Errorf("error %s = %q, want it to say %q", key, msg, f)
					}
				}
				if !strings.Contains(msg, "; fix: ") {
					t.Errorf("error %s = %q says no fix", key, msg)
				}
			}
			for key := range tt.errs {
				if _, ok := got.errs[key]; !ok {
					t.Errorf("missing error %s", key)
				}
			}
		})
	}
}

// TestResolveAnyWriteOrder writes a department and its projects one
// document at a time, in every order, from a consistent state to another
// one; whatever the order, all of them are in force at the end with no
// error, and every state on the way is consistent.
func TestResolveAnyWriteOrder(t *testing.T) {
	start := map[string]string{
		"d:research": `{"guaranteed": 4}`,
		"p:ml":       `{"guaranteed": 3, "department": "research"}`,
		"p:vision":   `{"guaranteed": 1, "department": "research"}`,
		"p:web":      `{"guaranteed": 2, "department": "product"}`,
		"d:product":  `{"guaranteed": 2}`,
	}
	end := map[string]string{
		"d:research": `{"guaranteed": 2}`,
		"p:ml":       `{"guaranteed": 1, "department": "research"}`,
		"p:vision":   `{"guaranteed": 1, "department": "product"}`,
		"p:web":      `{"guaranteed": 2, "department": "product"}`,
		"d:product":  `{"guaranteed": 3}`,
	}
	keys := sortedKeys(end)
	toDocs := func(m map[string]string) docs {
		d := docs{projects: map[string]string{}, departments: map[string]string{}}
		for k, v := range m {
			if n, ok := strings.CutPrefix(k, "p:"); ok {
				d.projects[n] = v
			} else {
				d.departments[strings.TrimPrefix(k, "d:")] = v
			}
		}
		return d
	}
	layout := kvlayout.New("t")
	permute(keys, func(order []string) {
		cur := map[string]string{}
		for k, v := range start {
			cur[k] = v
		}
		p, d := toDocs(cur).bytes()
		r := resolve(layout, p, d, inForce{projects: map[string]Settings{}, departments: map[string]Department{}})
		for _, k := range order {
			cur[k] = end[k]
			p, d := toDocs(cur).bytes()
			r = resolve(layout, p, d, r.inForce)
			checkConsistent(t, order, r)
		}
		got := summarize(r)
		want := "map[ml:1.00@research vision:1.00@product web:2.00@product] map[product:3.00 research:2.00] map[]"
		if s := fmt.Sprint(got.projects, got.departments, got.errs); s != want {
			t.Fatalf("written in order %v: in force %s, want %s", order, s, want)
		}
	})
}

func checkConsistent(t *testing.T, order []string, r resolution) {
	t.Helper()
	sums := map[string]int64{}
	for n, p := range r.projects {
		if p.Department == "" {
			continue
		}
		if _, ok := r.departments[p.Department]; !ok {
			t.Fatalf("order %v: project %s names department %s, not in force", order, n, p.Department)
		}
		sums[p.Department] += int64(p.Guaranteed)
	}
	for d, sum := range sums {
		if sum > int64(r.departments[d].Guaranteed) {
			t.Fatalf("order %v: department %s's projects hold %d shares guaranteed, above its %d", order, d, sum, r.departments[d].Guaranteed)
		}
	}
}

func permute(xs []string, f func([]string)) {
	var rec func(int)
	rec = func(i int) {
		if i == len(xs) {
			f(append([]string(nil), xs...))
			return
		}
		for j := i; j < len(xs); j++ {
			xs[i], xs[j] = xs[j], xs[i]
			rec(i + 1)
			xs[i], xs[j] = xs[j], xs[i]
		}
	}
	rec(0)
	sort.Strings(xs)
}

// FuzzResolveStaysConsistent: whatever documents are written, deleted or
// broken, one after another, the settings in force are consistent (every
// department a project names is in force, and a department's projects'
// guarantees fit in its own), so the planner's snapshot always indexes.
func FuzzResolveStaysConsistent(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{9, 9, 1, 200, 33, 7, 14, 250, 3, 3, 3})
	f.Fuzz(func(t *testing.T, ops []byte) {
		projects, departments := map[string]string{}, map[string]string{}
		names := []string{"a", "b", "c"}
		deps := []string{"x", "y"}
		layout := kvlayout.New("t")
		r := resolution{inForce: inForce{projects: map[string]Settings{}, departments: map[string]Department{}}}
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i], int(ops[i+1])
			g := fmt.Sprint(arg % 5)
			switch op % 6 {
			case 0: // a project on its own
				projects[names[arg%3]] = `{"guaranteed": ` + g + `}`
			case 1: // a project in a department
				projects[names[arg%3]] = `{"guaranteed": ` + g + `, "department": "` + deps[arg/3%2] + `"}`
			case 2:
				delete(projects, names[arg%3])
			case 3:
				departments[deps[arg%2]] = `{"guaranteed": ` + g + `}`
			case 4:
				delete(departments, deps[arg%2])
			case 5: // a broken document
				if arg%2 == 0 {
					projects[names[arg/2%3]] = `{"guaranteed": -1}`
				} else {
					departments[deps[arg/2%2]] = `{"guaranteed": 1, "parent": "z"}`
				}
			}
			p, d := docs{projects: projects, departments: departments}.bytes()
			r = resolve(layout, p, d, r.inForce)
			checkConsistent(t, nil, r)
			if docsAgree(p, d) && (len(r.projectErrs) > 0 || len(r.departmentErrs) > 0 || len(r.projects) != len(p) || len(r.departments) != len(d)) {
				t.Fatalf("documents that agree %v %v are not all in force: %+v", projects, departments, summarize(r))
			}
		}
	})
}

// docsAgree reports whether every document parses, every department a
// project names has a document, and every department's projects fit.
func docsAgree(projects, departments map[string][]byte) bool {
	guarantees := map[string]int64{}
	for name, doc := range departments {
		if _, err := ParseDepartment(name, doc); err != nil {
			return false
		}
	}
	for name, doc := range projects {
		s, err := Parse(name, doc)
		if err != nil {
			return false
		}
		if s.Department != "" {
			if _, ok := departments[s.Department]; !ok {
				return false
			}
			guarantees[s.Department] += int64(s.Guaranteed)
		}
	}
	for name, sum := range guarantees {
		d, _ := ParseDepartment(name, departments[name])
		if sum > int64(d.Guaranteed) {
			return false
		}
	}
	return true
}
