// Package scenario reads declarative scheduling scenarios and runs them
// through the planner, for one round or several.
//
// A scenario file is line oriented; '#' starts a comment. Each line is a
// keyword, positional words, and "key value" pairs:
//
//	scenario Two projects share four GPUs        (free text)
//	rounds 5                                     (default 1)
//	node n1 gpus 4 [model A100] [cpu 64] [mem 262144] [gpumem 81920] [mode any|whole|shared]
//	    [unavailable REASON] [unhealthy 2[,3..]]
//	department D guaranteed 4 [limit 8] [priority 1] [weight 1]
//	project A guaranteed 2 [limit 4] [priority 1] [weight 1] [surplus 50] [department D]
//	run JOB project A (gpus N | share 0.5) node n1 gpu 0[,1..] [group g] [priority 0]
//	    [nonpreemptible] [system] [start 10] [cpu 1] [mem 1024] [id ID] [model A100[,H100]]
//	    [gang] [min N] [young]
//	pending JOB project B (gpus N | share 0.5) [count 2] [submit 5] [round R]
//	    [group g] [priority 0] [nonpreemptible] [suspended] [cpu 1] [mem 1024] [model ...]
//	    [nodes n1[,n2..] | nodes none] [gang] [min N] [shrunk]
//	finish JOB round R                           (the job ends before round R)
//	expect deserved A 2 [round R]                (deserved share in round R, default 1; A a project or department)
//	expect suspend JOB... | none [round R]       (exactly these jobs are suspended)
//	expect place JOB [group g] [node n1] [gpu 0[,1..]] [round R]
//	expect unplaced JOB [round R]
//	expect unplaceable JOB [round R]             (fits nowhere; no demand)
//	expect actions N [round R]                   (number of actions in round R)
//	expect gangwait JOB... | none [round R]      (exactly these gangs wait whole)
//	expect shrink JOB... | none [round R]        (exactly these jobs shrink)
//	expect grow JOB... | none [round R]          (exactly these jobs grow back)
//	expect running JOB...                        (running after the last round)
//	expect waiting JOB...                        (pending after the last round)
//	expect usage A 2                             (GPUs held after the last round)
//	expect stable                                (the last round plans nothing, grows nothing)
//
// "gpus N" is always a count of whole GPUs (on node, run and pending
// lines); "gpu 0,1" always names GPU indexes on a node (the GPUs a run line
// is bound to, or an expected placement's).
//
// A node marked unavailable (one word says why, e.g. draining) is out of
// planning; its run lines may leave out gpu. "unhealthy" names the GPUs of a
// node that take no work. "weight 0" gives a project no share of the
// surplus (cluster.Project.NoOverQuota). "surplus N" is the project's
// time-aware surplus factor in percent (cluster.Project.SurplusFactor). "system" marks a system job's
// allocation, never a victim. "nodes" lists the only nodes a pending
// workload may run on, as its constraints would. "gang" marks a job whose
// GPU groups run all together or not at all, on its run and pending lines
// alike; "min N" makes a group elastic with minimum N (cluster.Allocation.
// MinCount); "shrunk" marks pending instances a shrink took from a running
// elastic group, which come back only by growth (plan.Result.Grow).
// "young" marks an allocation within its minimum runtime
// (cluster.Allocation.InMinRuntime); "movable" one that may be moved to
// make room (cluster.Allocation.Movable). A project's "department" names a
// department declared above it (cluster.Project.Department).
//
// Any expect line may end with the flag "firstfit": the expectation depends
// on which node and GPUs first-fit placement picks, and runs with other
// placement policies skip it. Those runs also ignore the node and gpu of
// "expect place" (see CheckPolicy).
//
// GPU amounts are GPUs with at most two decimals; CPU in cores, memory in
// MiB. Errors name the file, the line and the field at fault.
package scenario

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// Scenario is one parsed scenario file.
type Scenario struct {
	File        string
	Description string
	Rounds      int
	// Initial is the state before round 1 (with the pending workloads that
	// arrive in round 1).
	Initial  cluster.Snapshot
	Arrivals []Arrival
	Finishes []Finish
	Expects  []Expect
}

// Arrival is a pending workload submitted before a later round.
type Arrival struct {
	Round   int
	Pending cluster.Pending
}

// Finish ends a job (its allocations and pending work go) before a round.
type Finish struct {
	Round int
	Job   string
}

// Expect is one expectation line.
type Expect struct {
	Line int
	// What is the expectation's keyword: deserved, suspend, place,
	// unplaced, unplaceable, actions, gangwait, shrink, grow, running,
	// waiting, usage or stable.
	What   string
	Round  int
	Jobs   []string
	Name   string // project, or job for place/unplaced
	Amount cluster.Shares
	Count  int
	Group  string
	Node   string
	// GPUs, when HasGPU, are the GPU indexes an expected placement uses.
	GPUs   []int
	HasGPU bool
	// FirstFitOnly marks an expectation that holds only with first-fit
	// placement (the "firstfit" flag); runs with other policies skip it.
	FirstFitOnly bool
}

// ParseError is a scenario error at one line and field.
type ParseError struct {
	File  string
	Line  int
	Field string
	Err   error
}

func (e *ParseError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
	}
	return fmt.Sprintf("%s:%d: field %s: %v", e.File, e.Line, e.Field, e.Err)
}

func (e *ParseError) Unwrap() error { return e.Err }

// Errors a ParseError may wrap.
var (
	ErrMissing      = errors.New("missing")
	ErrUnknown      = errors.New("unknown")
	ErrBadValue     = errors.New("bad value")
	ErrOverCapacity = errors.New("over capacity")
)

// line is one tokenized line: positional words and key/value fields.
type line struct {
	num    int
	words  []string
	fields map[string]string
	flags  map[string]bool
}

type parser struct {
	file string
	sc   *Scenario
	// for the checks that need the whole file
	refs []ref
}

// ref is a run or pending line's references, checked once every node and
// project is known; node and gpus are a run line's binding (unbound: none
// given, on an unavailable node), nodes a pending line's node list.
type ref struct {
	line    int
	project string
	ask     cluster.Ask
	node    string
	gpus    []int
	unbound bool
	nodes   []string
}

// Parse reads a scenario. file names it in errors.
func Parse(file string, r io.Reader) (*Scenario, error) {
	p := &parser{file: file, sc: &Scenario{File: file, Rounds: 1}}
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 64*1024), 1024*1024)
	num := 0
	for scanner.Scan() {
		num++
		text := scanner.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		words := strings.Fields(text)
		if len(words) == 0 {
			continue
		}
		if err := p.line(num, words); err != nil {
			return nil, err
		}
	}
	if err := scanner.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if err := p.check(); err != nil {
		return nil, err
	}
	return p.sc, nil
}

func (p *parser) errf(num int, field string, base error, format string, args ...any) error {
	return &ParseError{File: p.file, Line: num, Field: field, Err: fmt.Errorf("%w: "+format, append([]any{base}, args...)...)}
}

// split separates positional words from key/value fields; keys lists the
// keys that take a value, flags those that stand alone.
func (p *parser) split(num int, words []string, keys, flags []string) (line, error) {
	l := line{num: num, fields: map[string]string{}, flags: map[string]bool{}}
	for i := 0; i < len(words); i++ {
		w := words[i]
		switch {
		case slices.Contains(flags, w):
			l.flags[w] = true
		case slices.Contains(keys, w):
			if i+1 >= len(words) {
				return l, p.errf(num, w, ErrMissing, "no value after %q", w)
			}
			if _, dup := l.fields[w]; dup {
				return l, p.errf(num, w, ErrBadValue, "given twice")
			}
			l.fields[w] = words[i+1]
			i++
		default:
			l.words = append(l.words, w)
		}
	}
	return l, nil
}

// splitNamed is split for a line that starts with a name (run, pending):
// the first word is the name even where it is also a flag ("gang"), unless
// it is a key that takes a value (the name is missing).
func (p *parser) splitNamed(num int, words []string, keys, flags []string) (line, error) {
	if len(words) == 0 || slices.Contains(keys, words[0]) {
		return p.split(num, words, keys, flags)
	}
	l, err := p.split(num, words[1:], keys, flags)
	l.words = append([]string{words[0]}, l.words...)
	return l, err
}

func (p *parser) line(num int, words []string) error {
	kw, rest := words[0], words[1:]
	switch kw {
	case "scenario":
		p.sc.Description = strings.Join(rest, " ")
		return nil
	case "rounds":
		if len(rest) != 1 {
			return p.errf(num, "rounds", ErrMissing, "want one number")
		}
		n, err := strconv.Atoi(rest[0])
		if err != nil || n < 1 || n > 100 {
			return p.errf(num, "rounds", ErrBadValue, "%q is not a round count 1-100", rest[0])
		}
		p.sc.Rounds = n
		return nil
	case "node":
		return p.node(num, rest)
	case "project":
		return p.project(num, rest)
	case "department":
		return p.department(num, rest)
	case "run":
		return p.run(num, rest)
	case "pending":
		return p.pending(num, rest)
	case "finish":
		return p.finish(num, rest)
	case "expect":
		return p.expect(num, rest)
	}
	return p.errf(num, "", ErrUnknown, "keyword %q", kw)
}

// one returns the single positional word (a name).
func (p *parser) one(l line, field string) (string, error) {
	if len(l.words) == 0 {
		return "", p.errf(l.num, field, ErrMissing, "no %s", field)
	}
	if len(l.words) > 1 {
		return "", p.errf(l.num, l.words[1], ErrUnknown, "unexpected word %q", l.words[1])
	}
	return l.words[0], nil
}

func (p *parser) intField(l line, key string, def, lo, hi int64) (int64, error) {
	v, ok := l.fields[key]
	if !ok {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, p.errf(l.num, key, ErrBadValue, "%q is not an integer in [%d, %d]", v, lo, hi)
	}
	return n, nil
}

// gpuCount reads key gpus of an ask, a count of whole GPUs; a list there
// is GPU indexes meant for key gpu.
func (p *parser) gpuCount(l line, def, lo, hi int64) (int64, error) {
	if v := l.fields["gpus"]; strings.Contains(v, ",") {
		return 0, p.errf(l.num, "gpus", ErrBadValue, "%q is a list, but gpus is a count of whole GPUs (a run line binds GPU indexes with gpu %s)", v, v)
	}
	return p.intField(l, "gpus", def, lo, hi)
}

func (p *parser) sharesField(l line, key string, required bool) (cluster.Shares, bool, error) {
	v, ok := l.fields[key]
	if !ok {
		if required {
			return 0, false, p.errf(l.num, key, ErrMissing, "required")
		}
		return 0, false, nil
	}
	s, err := cluster.ParseShares(v)
	if err != nil {
		return 0, false, p.errf(l.num, key, ErrBadValue, "%v", err)
	}
	if s < 0 {
		return 0, false, p.errf(l.num, key, ErrBadValue, "negative GPU amount %s", v)
	}
	if s > cluster.GPUs(1_000_000) {
		return 0, false, p.errf(l.num, key, ErrOverCapacity, "%s GPUs", v)
	}
	return s, true, nil
}

func (p *parser) intList(l line, key string) ([]int, error) {
	v := l.fields[key]
	var out []int
	for _, part := range strings.Split(v, ",") {
		n, err := strconv.Atoi(part)
		if err != nil || n < 0 || n > 1024 {
			return nil, p.errf(l.num, key, ErrBadValue, "%q is not a list of GPU indexes", v)
		}
		out = append(out, n)
	}
	return out, nil
}

func (p *parser) node(num int, words []string) error {
	l, err := p.split(num, words, []string{"gpus", "model", "cpu", "mem", "gpumem", "mode", "unavailable", "unhealthy"}, nil)
	if err != nil {
		return err
	}
	name, err := p.one(l, "name")
	if err != nil {
		return err
	}
	if _, ok := l.fields["gpus"]; !ok {
		return p.errf(num, "gpus", ErrMissing, "required")
	}
	gpus, err := p.intField(l, "gpus", 0, 0, 64)
	if err != nil {
		return err
	}
	cpu, err := p.intField(l, "cpu", 1024, 0, 1<<20)
	if err != nil {
		return err
	}
	mem, err := p.intField(l, "mem", 1<<30, 0, 1<<40)
	if err != nil {
		return err
	}
	gpumem, err := p.intField(l, "gpumem", 81920, 0, 1<<30)
	if err != nil {
		return err
	}
	mode := cluster.ModeAny
	switch l.fields["mode"] {
	case "", "any":
	case "whole":
		mode = cluster.ModeWhole
	case "shared":
		mode = cluster.ModeShared
	default:
		return p.errf(num, "mode", ErrBadValue, "%q is not any, whole or shared", l.fields["mode"])
	}
	gpuModel := l.fields["model"]
	if gpuModel == "" {
		gpuModel = "A100"
	}
	for _, n := range p.sc.Initial.Nodes {
		if n.Name == name {
			return p.errf(num, "name", ErrBadValue, "node %q declared twice", name)
		}
	}
	node := cluster.Node{Name: name, CPUMilli: cpu * 1000, MemoryMiB: mem, GPUs: make([]cluster.GPU, gpus), Unavailable: l.fields["unavailable"]}
	for i := range node.GPUs {
		node.GPUs[i] = cluster.GPU{Model: gpuModel, MemoryMiB: gpumem, Mode: mode}
	}
	if _, ok := l.fields["unhealthy"]; ok {
		bad, err := p.intList(l, "unhealthy")
		if err != nil {
			return err
		}
		for _, g := range bad {
			if g >= len(node.GPUs) {
				return p.errf(num, "unhealthy", ErrUnknown, "node %q has no GPU %d", name, g)
			}
			node.GPUs[g].Unavailable = "unhealthy"
		}
	}
	p.sc.Initial.Nodes = append(p.sc.Initial.Nodes, node)
	return nil
}

func (p *parser) project(num int, words []string) error {
	l, err := p.split(num, words, []string{"guaranteed", "limit", "priority", "weight", "surplus", "department"}, nil)
	if err != nil {
		return err
	}
	q, err := p.quota(l)
	if err != nil {
		return err
	}
	surplus, err := p.intField(l, "surplus", 0, 1, 100)
	if err != nil {
		return err
	}
	q.SurplusFactor = float64(surplus) / 100
	q.Department = l.fields["department"]
	if q.Department != "" && !slices.ContainsFunc(p.sc.Initial.Departments, func(d cluster.Project) bool { return d.Name == q.Department }) {
		return p.errf(num, "department", ErrBadValue, "department %q is not declared above the project", q.Department)
	}
	for _, o := range p.sc.Initial.Projects {
		if o.Name == q.Name {
			return p.errf(num, "name", ErrBadValue, "project %q declared twice", q.Name)
		}
	}
	p.sc.Initial.Projects = append(p.sc.Initial.Projects, q)
	return nil
}

// department reads "department NAME guaranteed G [limit L] [priority P]
// [weight W]".
func (p *parser) department(num int, words []string) error {
	l, err := p.split(num, words, []string{"guaranteed", "limit", "priority", "weight"}, nil)
	if err != nil {
		return err
	}
	d, err := p.quota(l)
	if err != nil {
		return err
	}
	for _, o := range p.sc.Initial.Departments {
		if o.Name == d.Name {
			return p.errf(num, "name", ErrBadValue, "department %q declared twice", d.Name)
		}
	}
	p.sc.Initial.Departments = append(p.sc.Initial.Departments, d)
	return nil
}

// quota reads the name and quota settings a project and a department
// share.
func (p *parser) quota(l line) (cluster.Project, error) {
	name, err := p.one(l, "name")
	if err != nil {
		return cluster.Project{}, err
	}
	g, _, err := p.sharesField(l, "guaranteed", true)
	if err != nil {
		return cluster.Project{}, err
	}
	limit, hasLimit, err := p.sharesField(l, "limit", false)
	if err != nil {
		return cluster.Project{}, err
	}
	prio, err := p.intField(l, "priority", 0, -1_000_000, 1_000_000)
	if err != nil {
		return cluster.Project{}, err
	}
	weight, err := p.intField(l, "weight", 1, 0, 1_000_000)
	if err != nil {
		return cluster.Project{}, err
	}
	return cluster.Project{Name: name, Guaranteed: g, Limit: limit, HasLimit: hasLimit, Priority: int(prio),
		OverQuotaWeight: weight, NoOverQuota: weight == 0}, nil
}

// workload is what run and pending lines share.
type workload struct {
	job, project, group string
	priority            int
	preemptible         bool
	ask                 cluster.Ask
	gang                bool
	minCount            int
}

var workloadKeys = []string{"project", "group", "priority", "gpus", "share", "cpu", "mem", "model", "min"}

func (p *parser) workload(l line) (workload, error) {
	var w workload
	job, err := p.one(l, "job")
	if err != nil {
		return w, err
	}
	w.job = job
	w.project = l.fields["project"]
	if w.project == "" {
		return w, p.errf(l.num, "project", ErrMissing, "required")
	}
	w.group = l.fields["group"]
	if w.group == "" {
		w.group = "main"
	}
	prio, err := p.intField(l, "priority", 0, -1_000_000, 1_000_000)
	if err != nil {
		return w, err
	}
	w.priority = int(prio)
	w.preemptible = !l.flags["nonpreemptible"]
	w.gang = l.flags["gang"]
	minCount, err := p.intField(l, "min", 0, 1, 10_000)
	if err != nil {
		return w, err
	}
	w.minCount = int(minCount)
	w.ask, err = p.ask(l)
	return w, err
}

// ask reads what one instance asks: gpus N or share X, cpu, mem and model.
func (p *parser) ask(l line) (cluster.Ask, error) {
	var ask cluster.Ask
	_, hasWhole := l.fields["gpus"]
	_, hasShare := l.fields["share"]
	switch {
	case hasWhole && hasShare:
		return ask, p.errf(l.num, "share", ErrBadValue, "give either gpus or share, not both")
	case !hasWhole && !hasShare:
		if v, ok := l.fields["gpu"]; ok {
			return ask, p.errf(l.num, "gpu", ErrMissing, "gpu %s names GPU indexes; ask for whole GPUs with gpus N or for a share with share X", v)
		}
		return ask, p.errf(l.num, "gpus", ErrMissing, "give gpus N or share X")
	case hasWhole:
		n, err := p.gpuCount(l, 0, -1<<31, 1<<31)
		if err != nil {
			return ask, err
		}
		if n < 0 {
			return ask, p.errf(l.num, "gpus", ErrBadValue, "negative GPU count %d", n)
		}
		ask.WholeGPUs = int(n)
	default:
		s, _, err := p.sharesField(l, "share", true)
		if err != nil {
			return ask, err
		}
		if s == 0 || s >= cluster.SharesPerGPU {
			return ask, p.errf(l.num, "share", ErrOverCapacity, "share %s must be above 0 and below one GPU", s)
		}
		ask.Shares = s
	}
	cpu, err := p.intField(l, "cpu", 0, 0, 1<<20)
	if err != nil {
		return ask, err
	}
	mem, err := p.intField(l, "mem", 0, 0, 1<<40)
	if err != nil {
		return ask, err
	}
	ask.CPUMilli, ask.MemoryMiB = cpu*1000, mem
	if m := l.fields["model"]; m != "" {
		ask.Models = strings.Split(m, ",")
	}
	return ask, nil
}

func (p *parser) run(num int, words []string) error {
	l, err := p.splitNamed(num, words, append([]string{"node", "gpu", "start", "id"}, workloadKeys...), []string{"nonpreemptible", "system", "gang", "young", "movable"})
	if err != nil {
		return err
	}
	w, err := p.workload(l)
	if err != nil {
		return err
	}
	node := l.fields["node"]
	if node == "" {
		return p.errf(num, "node", ErrMissing, "required")
	}
	var gpus []int
	_, bound := l.fields["gpu"]
	if w.ask.GPUShares() > 0 && (bound || !p.unavailable(node)) {
		if !bound {
			return p.errf(num, "gpu", ErrMissing, "GPU binding required (only a run line on an unavailable node may leave it out)")
		}
		if gpus, err = p.intList(l, "gpu"); err != nil {
			return err
		}
	}
	start, err := p.intField(l, "start", 0, 0, 1<<40)
	if err != nil {
		return err
	}
	id := l.fields["id"]
	if id == "" {
		id = fmt.Sprintf("%s/%s/%d", w.job, w.group, len(p.sc.Initial.Allocations))
	}
	for _, a := range p.sc.Initial.Allocations {
		if a.Job == w.job && (a.Project != w.project || a.Priority != w.priority) {
			return p.errf(num, "project", ErrBadValue, "job %q already runs with another project or priority", w.job)
		}
		if a.Job == w.job && a.Gang != w.gang {
			return p.errf(num, "gang", ErrBadValue, "job %q already runs with gang %v", w.job, a.Gang)
		}
	}
	p.sc.Initial.Allocations = append(p.sc.Initial.Allocations, cluster.Allocation{
		ID: id, Project: w.project, Job: w.job, Group: w.group, Priority: w.priority, Preemptible: w.preemptible,
		System: l.flags["system"], Ask: w.ask, Node: node, GPUs: gpus, Start: start, Gang: w.gang, MinCount: w.minCount,
		InMinRuntime: l.flags["young"], Movable: l.flags["movable"],
	})
	p.refs = append(p.refs, ref{line: num, project: w.project, node: node, gpus: gpus, ask: w.ask, unbound: !bound})
	return nil
}

// unavailable reports whether node name, declared above, is unavailable.
func (p *parser) unavailable(name string) bool {
	for _, n := range p.sc.Initial.Nodes {
		if n.Name == name {
			return n.Unavailable != ""
		}
	}
	return false
}

func (p *parser) pending(num int, words []string) error {
	l, err := p.splitNamed(num, words, append([]string{"count", "submit", "round", "gpu", "nodes"}, workloadKeys...), []string{"nonpreemptible", "suspended", "gang", "shrunk"})
	if err != nil {
		return err
	}
	w, err := p.workload(l)
	if err != nil {
		return err
	}
	if _, ok := l.fields["gpu"]; ok {
		return p.errf(num, "gpu", ErrBadValue, "pending work is not bound to GPUs; drop gpu (the count is gpus N)")
	}
	count, err := p.intField(l, "count", 1, 1, 10_000)
	if err != nil {
		return err
	}
	submit, err := p.intField(l, "submit", 0, 0, 1<<40)
	if err != nil {
		return err
	}
	round, err := p.intField(l, "round", 1, 1, 100)
	if err != nil {
		return err
	}
	if l.flags["shrunk"] && (l.flags["suspended"] || w.minCount == 0) {
		return p.errf(num, "shrunk", ErrBadValue, "shrunk instances belong to an elastic group (min N) and are not suspended")
	}
	pw := cluster.Pending{
		Project: w.project, Job: w.job, Group: w.group, Priority: w.priority, Preemptible: w.preemptible,
		Ask: w.ask, Count: int(count), Submit: submit, Suspended: l.flags["suspended"],
		Gang: w.gang, MinCount: w.minCount, Shrunk: l.flags["shrunk"],
	}
	if v, ok := l.fields["nodes"]; ok {
		pw.Nodes, pw.NodesReason = []string{}, "the scenario's nodes list"
		if v != "none" {
			pw.Nodes = strings.Split(v, ",")
		}
	}
	if round == 1 {
		p.sc.Initial.Pending = append(p.sc.Initial.Pending, pw)
	} else {
		p.sc.Arrivals = append(p.sc.Arrivals, Arrival{Round: int(round), Pending: pw})
	}
	p.refs = append(p.refs, ref{line: num, project: w.project, ask: w.ask, nodes: pw.Nodes})
	return nil
}

func (p *parser) finish(num int, words []string) error {
	l, err := p.split(num, words, []string{"round"}, nil)
	if err != nil {
		return err
	}
	job, err := p.one(l, "job")
	if err != nil {
		return err
	}
	if _, ok := l.fields["round"]; !ok {
		return p.errf(num, "round", ErrMissing, "required")
	}
	round, err := p.intField(l, "round", 1, 2, 100)
	if err != nil {
		return err
	}
	p.sc.Finishes = append(p.sc.Finishes, Finish{Round: int(round), Job: job})
	return nil
}

func (p *parser) expect(num int, words []string) error {
	if len(words) == 0 {
		return p.errf(num, "expect", ErrMissing, "what to expect")
	}
	l, err := p.split(num, words[1:], []string{"round", "group", "node", "gpu", "gpus"}, []string{"firstfit"})
	if err != nil {
		return err
	}
	e := Expect{Line: num, What: words[0], FirstFitOnly: l.flags["firstfit"]}
	round, err := p.intField(l, "round", 1, 1, 100)
	if err != nil {
		return err
	}
	e.Round = int(round)
	switch e.What {
	case "deserved", "usage":
		err = p.expectAmount(l, &e)
	case "suspend", "gangwait", "shrink", "grow", "running", "waiting":
		err = p.expectJobs(l, &e)
	case "place", "unplaced", "unplaceable":
		err = p.expectPlace(l, &e)
	case "actions":
		err = p.expectCount(l, &e)
	case "stable":
		if len(l.words) > 0 {
			err = p.errf(num, l.words[0], ErrUnknown, "unexpected word")
		}
	default:
		err = p.errf(num, "expect", ErrUnknown, "expectation %q", e.What)
	}
	if err != nil {
		return err
	}
	if v, ok := l.fields["gpus"]; ok {
		return p.errf(num, "gpus", ErrBadValue, "gpus is a count of whole GPUs; an expected placement names its GPU indexes with gpu %s", v)
	}
	p.sc.Expects = append(p.sc.Expects, e)
	return nil
}

// expectAmount reads "PROJECT AMOUNT" (deserved, usage).
func (p *parser) expectAmount(l line, e *Expect) error {
	if len(l.words) != 2 {
		return p.errf(l.num, e.What, ErrMissing, "want a project and a GPU amount")
	}
	e.Name = l.words[0]
	s, err := cluster.ParseShares(l.words[1])
	if err != nil || s < 0 {
		return p.errf(l.num, e.What, ErrBadValue, "%q is not a GPU amount", l.words[1])
	}
	e.Amount = s
	return nil
}

// expectJobs reads "JOB..." or "none" (suspend, running, waiting).
func (p *parser) expectJobs(l line, e *Expect) error {
	if len(l.words) == 0 {
		return p.errf(l.num, "jobs", ErrMissing, "list jobs, or none")
	}
	if !(len(l.words) == 1 && l.words[0] == "none") {
		e.Jobs = l.words
	}
	return nil
}

// expectPlace reads "JOB [group g] [node n] [gpu 0,1]" (place, unplaced).
func (p *parser) expectPlace(l line, e *Expect) error {
	name, err := p.one(l, "job")
	if err != nil {
		return err
	}
	e.Name, e.Group, e.Node = name, l.fields["group"], l.fields["node"]
	if _, ok := l.fields["gpu"]; ok {
		if e.GPUs, err = p.intList(l, "gpu"); err != nil {
			return err
		}
		e.HasGPU = true
	}
	return nil
}

// expectCount reads "N" (actions).
func (p *parser) expectCount(l line, e *Expect) error {
	n, err := p.one(l, "count")
	if err != nil {
		return err
	}
	c, err := strconv.Atoi(n)
	if err != nil || c < 0 {
		return p.errf(l.num, "count", ErrBadValue, "%q is not a count", n)
	}
	e.Count = c
	return nil
}

// check resolves references once the whole file is read.
func (p *parser) check() error {
	c := p.cluster()
	for _, r := range p.refs {
		if err := p.checkRef(r, c); err != nil {
			return err
		}
	}
	if _, err := p.sc.Initial.Index(); err != nil {
		return &ParseError{File: p.file, Line: p.culprit(), Field: "gpu", Err: err}
	}
	return nil
}

// clusterFacts is what references are checked against.
type clusterFacts struct {
	projects map[string]bool
	nodes    map[string]*cluster.Node
	models   map[string]bool
	// maxGPUs and maxCPU are the largest node's.
	maxGPUs int
	maxCPU  int64
}

func (p *parser) cluster() clusterFacts {
	sc := p.sc
	c := clusterFacts{projects: map[string]bool{}, nodes: map[string]*cluster.Node{}, models: map[string]bool{}}
	for _, q := range sc.Initial.Projects {
		c.projects[q.Name] = true
	}
	for i := range sc.Initial.Nodes {
		n := &sc.Initial.Nodes[i]
		c.nodes[n.Name] = n
		c.maxGPUs = max(c.maxGPUs, len(n.GPUs))
		c.maxCPU = max(c.maxCPU, n.CPUMilli)
		for _, g := range n.GPUs {
			c.models[g.Model] = true
		}
	}
	return c
}

// checkRef checks one run or pending line against the cluster: its
// project and models exist, its ask fits the largest node, and a run
// line's node and GPU binding exist and match the ask.
func (p *parser) checkRef(r ref, c clusterFacts) error {
	if !c.projects[r.project] {
		return p.errf(r.line, "project", ErrUnknown, "project %q", r.project)
	}
	for _, m := range r.ask.Models {
		if !c.models[m] {
			return p.errf(r.line, "model", ErrUnknown, "GPU model %q is on no node", m)
		}
	}
	if r.ask.WholeGPUs > c.maxGPUs {
		return p.errf(r.line, "gpus", ErrOverCapacity, "%d GPUs, the largest node has %d", r.ask.WholeGPUs, c.maxGPUs)
	}
	if r.ask.CPUMilli > c.maxCPU {
		return p.errf(r.line, "cpu", ErrOverCapacity, "%d cores, the largest node has %d", r.ask.CPUMilli/1000, c.maxCPU/1000)
	}
	for _, name := range r.nodes {
		if c.nodes[name] == nil {
			return p.errf(r.line, "nodes", ErrUnknown, "node %q", name)
		}
	}
	if r.node == "" {
		return nil
	}
	n, ok := c.nodes[r.node]
	if !ok {
		return p.errf(r.line, "node", ErrUnknown, "node %q", r.node)
	}
	if r.unbound && n.Unavailable != "" {
		return nil
	}
	want := r.ask.WholeGPUs
	if r.ask.Shares > 0 {
		want = 1
	}
	if len(r.gpus) != want {
		return p.errf(r.line, "gpu", ErrBadValue, "ask needs %d GPU(s), %d bound", want, len(r.gpus))
	}
	for _, g := range r.gpus {
		if g >= len(n.GPUs) {
			return p.errf(r.line, "gpu", ErrUnknown, "node %q has no GPU %d", r.node, g)
		}
	}
	return nil
}

// culprit finds the line of the first run line whose allocation makes the
// snapshot contradict itself (an over-committed GPU, CPU or memory, or a GPU
// used against its mode), by bisecting on the allocations.
func (p *parser) culprit() int {
	all := p.sc.Initial.Allocations
	defer func() { p.sc.Initial.Allocations = all }()
	lo, hi := 0, len(all) // the prefix of length hi fails
	for lo+1 < hi {
		mid := (lo + hi) / 2
		p.sc.Initial.Allocations = all[:mid]
		if _, err := p.sc.Initial.Index(); err != nil {
			hi = mid
		} else {
			lo = mid
		}
	}
	n := 0
	for _, r := range p.refs {
		if r.node != "" {
			n++
			if n == hi {
				return r.line
			}
		}
	}
	return 0
}
