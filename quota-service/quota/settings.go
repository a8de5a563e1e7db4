// Package quota reads project quota documents from Consul KV and keeps the
// last good settings of every project in force.
//
// One JSON document per project lives at <root>/quotas/<project>:
//
//	{
//	  "guaranteed": 1.5,            // GPUs, at most two decimals (required)
//	  "limit": 3,                   // hard cap in GPUs (optional, >= guaranteed)
//	  "priority": 10,               // higher wins over-quota capacity (default 0)
//	  "over_quota_weight": 2,       // split of over-quota capacity (default 1; 0: no share of it)
//	  "min_runtime": "10m",         // no fair-share reclaim or in-project preemption before (default 0; at most 24h)
//	  "department": "research",     // the project's department (<root>/departments/<name>; default: none)
//	  "mapping": {
//	    "namespace": "ml",          // Nomad namespace of the project (default: the project name)
//	    "job_meta_key": "project"   // a job whose meta[key] names this project belongs to it
//	  }
//	}
//
// Departments group projects one level up: one JSON document per
// department at <root>/departments/<name> (department.go). Departments do
// not nest.
//
// Parsing is strict: unknown fields, trailing data and wrong types are
// rejected, and every error names the field and how to fix it. A Watcher
// follows the folder with Consul blocking queries; a rejected document is
// logged and reported at <root>/status/quota-errors/<project>, and the
// project's last good settings stay in force.
package quota

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// Settings are one project's quota settings with defaults applied.
type Settings struct {
	Project         string         `json:"project"`
	Guaranteed      cluster.Shares `json:"guaranteed_shares"`
	Limit           cluster.Shares `json:"limit_shares,omitempty"`
	HasLimit        bool           `json:"has_limit"`
	Priority        int            `json:"priority"`
	OverQuotaWeight int64          `json:"over_quota_weight"`
	// Namespace is the Nomad namespace whose jobs belong to the project.
	Namespace string `json:"namespace"`
	// JobMetaKey, when set, names a job meta key: a job whose meta value
	// under that key is this project's name belongs to this project,
	// whatever its namespace.
	JobMetaKey string `json:"job_meta_key,omitempty"`
	// MinRuntime is how long the project's jobs run before reclaim for
	// a project above its guarantee or preemption inside the project may
	// take them (docs/design.md, Minimum runtime); a job's meta
	// gpushare.min_runtime may shorten it for that job.
	MinRuntime time.Duration `json:"min_runtime,omitempty"`
	// Department names the project's department ("": on its own).
	Department string `json:"department,omitempty"`
}

// MaxMinRuntime bounds a project's min_runtime.
const MaxMinRuntime = 24 * time.Hour

// Model returns the settings as the planner's project record.
func (s Settings) Model() cluster.Project {
	return cluster.Project{
		Name:            s.Project,
		Guaranteed:      s.Guaranteed,
		Limit:           s.Limit,
		HasLimit:        s.HasLimit,
		Priority:        s.Priority,
		OverQuotaWeight: s.OverQuotaWeight,
		NoOverQuota:     s.OverQuotaWeight == 0,
		Department:      s.Department,
	}
}

// FieldError is a rejected quota or department document: which field is
// wrong and how to fix it. Field is "" when the document as a whole is
// malformed.
type FieldError struct {
	// Project names the project, or the department when Department is
	// set.
	Project string
	// Department marks an error in a department's document or in the
	// consistency of a department with its projects.
	Department bool
	Field      string
	Problem    string
	Fix        string
}

func (e *FieldError) Error() string {
	where := "document"
	if e.Field != "" {
		where = fmt.Sprintf("field %q", e.Field)
	}
	who := fmt.Sprintf("quota for project %q", e.Project)
	if e.Department {
		who = fmt.Sprintf("department %q", e.Project)
	}
	return fmt.Sprintf("%s: %s: %s; fix: %s", who, where, e.Problem, e.Fix)
}

// document is the wire form; pointers tell "absent" from zero.
type document struct {
	Guaranteed      json.RawMessage `json:"guaranteed"`
	Limit           json.RawMessage `json:"limit"`
	Priority        json.RawMessage `json:"priority"`
	OverQuotaWeight json.RawMessage `json:"over_quota_weight"`
	MinRuntime      json.RawMessage `json:"min_runtime"`
	Department      json.RawMessage `json:"department"`
	Mapping         *mapping        `json:"mapping"`
}

type mapping struct {
	Namespace  *string `json:"namespace"`
	JobMetaKey *string `json:"job_meta_key"`
}

var (
	// Nomad namespaces: letters, digits, '-' and '_', up to 128.
	namespaceRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,128}$`)
	// Project names become KV key segments and metric labels.
	projectRE = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,128}$`)
)

// validProjectName reports whether name can name a project (the last
// segment of its KV key): 1-128 letters, digits, '.', '-' or '_'.
func validProjectName(name string) error {
	if !projectRE.MatchString(name) {
		return &FieldError{Project: name, Problem: "the project name (the key below the quotas folder) is empty, too long, nested or has characters other than letters, digits, '.', '-' and '_'",
			Fix: "store the document directly under the quotas folder with a name like \"ml-team\""}
	}
	return nil
}

// Parse reads and validates the quota document of project. Errors are
// *FieldError.
func Parse(project string, data []byte) (Settings, error) {
	if err := validProjectName(project); err != nil {
		return Settings{}, err
	}
	fe := func(field, problem, fix string) error {
		return &FieldError{Project: project, Field: field, Problem: problem, Fix: fix}
	}
	var doc document
	if trailing, err := decodeOne(data, &doc); err != nil {
		return Settings{}, decodeError(project, err)
	} else if trailing {
		return Settings{}, fe("", "data after the JSON object", "store exactly one JSON object")
	}
	s := Settings{Project: project, Namespace: project, OverQuotaWeight: 1}
	c, err := parseCommon(commonFields{doc.Guaranteed, doc.Limit, doc.Priority, doc.OverQuotaWeight}, fe)
	if err != nil {
		return Settings{}, err
	}
	s.Guaranteed, s.Limit, s.HasLimit, s.Priority, s.OverQuotaWeight = c.Guaranteed, c.Limit, c.HasLimit, c.Priority, c.OverQuotaWeight
	if doc.Department != nil {
		var name string
		if err := json.Unmarshal(doc.Department, &name); err != nil || !projectRE.MatchString(name) {
			return Settings{}, fe("department", fmt.Sprintf("%.40s is not a department name", doc.Department),
				`name a department with a document under the departments folder, e.g. "department": "research" (1-128 letters, digits, '.', '-' or '_'), or remove it for a project on its own`)
		}
		s.Department = name
	}
	if doc.MinRuntime != nil {
		var text string
		d, err := time.Duration(0), json.Unmarshal(doc.MinRuntime, &text)
		if err == nil {
			d, err = time.ParseDuration(text)
		}
		if err != nil || d < 0 || d > MaxMinRuntime {
			return Settings{}, fe("min_runtime", fmt.Sprintf("%.40s is not a duration from 0s to 24h", doc.MinRuntime), `write a duration string such as "10m", or remove it for none`)
		}
		s.MinRuntime = d
	}
	if m := doc.Mapping; m != nil {
		if m.Namespace != nil {
			if !namespaceRE.MatchString(*m.Namespace) {
				return Settings{}, fe("mapping.namespace", fmt.Sprintf("%q is not a Nomad namespace name", *m.Namespace), "use 1-128 letters, digits, '-' or '_', or remove it to use the project name")
			}
			s.Namespace = *m.Namespace
		}
		if m.JobMetaKey != nil {
			k := *m.JobMetaKey
			if k == "" || len(k) > 128 || strings.ContainsAny(k, " \t\r\n") {
				return Settings{}, fe("mapping.job_meta_key", fmt.Sprintf("%q is not a usable meta key", k), "name a job meta key of 1-128 characters without spaces, e.g. \"project\", or remove it")
			}
			s.JobMetaKey = k
		}
	}
	return s, nil
}

// decodeOne decodes data, one JSON object, into doc: unknown fields are
// an error and numbers stay json.Number. trailing reports data after the
// object.
func decodeOne(data []byte, doc any) (trailing bool, err error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(doc); err != nil {
		return false, err
	}
	_, err = dec.Token()
	return !errors.Is(err, io.EOF), nil
}

// commonFields are the fields projects and departments share, raw.
type commonFields struct {
	Guaranteed, Limit, Priority, OverQuotaWeight json.RawMessage
}

// common are the fields projects and departments share, parsed, with the
// default weight 1.
type common struct {
	Guaranteed      cluster.Shares
	Limit           cluster.Shares
	HasLimit        bool
	Priority        int
	OverQuotaWeight int64
}

// parseCommon checks guaranteed, limit, priority and over_quota_weight;
// fe makes the error of a field.
func parseCommon(doc commonFields, fe func(field, problem, fix string) error) (common, error) {
	c := common{OverQuotaWeight: 1}
	if doc.Guaranteed == nil {
		return common{}, fe("guaranteed", "missing", `add "guaranteed": <GPUs>, e.g. "guaranteed": 1.5 (0 for no guarantee)`)
	}
	g, err := gpuAmount(doc.Guaranteed)
	if err != nil {
		return common{}, fe("guaranteed", err.Error(), "write a GPU amount >= 0 with at most two decimals, e.g. 1.5")
	}
	c.Guaranteed = g
	if doc.Limit != nil {
		l, err := gpuAmount(doc.Limit)
		if err != nil {
			return common{}, fe("limit", err.Error(), "write a GPU amount >= 0 with at most two decimals, e.g. 4, or remove \"limit\" for no cap")
		}
		if l < g {
			return common{}, fe("limit", fmt.Sprintf("limit %s is below guaranteed %s", l, g), "raise \"limit\" to at least \"guaranteed\" or lower \"guaranteed\"")
		}
		c.Limit, c.HasLimit = l, true
	}
	if doc.Priority != nil {
		p, err := integer(doc.Priority, -1_000_000, 1_000_000)
		if err != nil {
			return common{}, fe("priority", err.Error(), "write an integer between -1000000 and 1000000, e.g. 10 (higher wins)")
		}
		c.Priority = int(p)
	}
	if doc.OverQuotaWeight != nil {
		w, err := integer(doc.OverQuotaWeight, 0, 1_000_000)
		if err != nil {
			return common{}, fe("over_quota_weight", err.Error(), "write an integer between 0 (no share of the over-quota capacity) and 1000000, or remove it for the default 1")
		}
		c.OverQuotaWeight = w
	}
	return c, nil
}

// projectFields lists a project document's fields for error messages.
const projectFields = "guaranteed, limit, priority, over_quota_weight, min_runtime, department and mapping (namespace, job_meta_key)"

// decodeError turns a JSON decoding error into a FieldError naming the
// field where possible.
func decodeError(project string, err error) error {
	return decodeErrorOf(&FieldError{Project: project}, projectFields, err)
}

// decodeErrorOf is decodeError for the document of base (its Project and
// Department set), whose fields are known.
func decodeErrorOf(base *FieldError, known string, err error) error {
	e := func(field, problem, fix string) error {
		out := *base
		out.Field, out.Problem, out.Fix = field, problem, fix
		return &out
	}
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		field := typeErr.Field
		return e(field, fmt.Sprintf("JSON %s where %s is expected", typeErr.Value, expectedKind(field)), fmt.Sprintf("write %s", expectedKind(field)))
	case errors.As(err, &syntaxErr):
		return e("", fmt.Sprintf("not valid JSON at byte %d: %v", syntaxErr.Offset, err), `store a JSON object such as {"guaranteed": 2}`)
	case errors.Is(err, io.EOF):
		return e("", "empty document", `store a JSON object such as {"guaranteed": 2}`)
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return e(strings.Trim(f, `"`), "unknown field", "remove it; known fields are "+known)
	}
	return e("", msg, `store a JSON object such as {"guaranteed": 2}`)
}

func expectedKind(field string) string {
	switch field {
	case "guaranteed", "limit":
		return "a number of GPUs"
	case "priority", "over_quota_weight":
		return "an integer"
	case "mapping":
		return `an object like {"namespace": "ml"}`
	case "mapping.namespace", "mapping.job_meta_key", "min_runtime", "department":
		return "a string"
	}
	return "a JSON object"
}

// number returns the literal of a JSON number, refusing strings, null and
// other values.
func number(raw json.RawMessage) (json.Number, error) {
	s := string(raw)
	if s == "" || !(s[0] == '-' || s[0] >= '0' && s[0] <= '9') {
		return "", fmt.Errorf("%.40s is not a JSON number", s)
	}
	return json.Number(s), nil
}

// gpuAmount converts a JSON number to shares exactly.
func gpuAmount(raw json.RawMessage) (cluster.Shares, error) {
	n, err := number(raw)
	if err != nil {
		return 0, err
	}
	s := string(n)
	if strings.ContainsAny(s, "eE") {
		return 0, fmt.Errorf("%s uses an exponent", s)
	}
	v, err := cluster.ParseShares(s)
	if err != nil {
		return 0, err
	}
	if v < 0 {
		return 0, fmt.Errorf("%s is negative", s)
	}
	return v, nil
}

func integer(raw json.RawMessage, lo, hi int64) (int64, error) {
	n, err := number(raw)
	if err != nil {
		return 0, err
	}
	v, err := n.Int64()
	if err != nil {
		return 0, fmt.Errorf("%s is not an integer", n)
	}
	if v < lo || v > hi {
		return 0, fmt.Errorf("%d is out of range", v)
	}
	return v, nil
}
