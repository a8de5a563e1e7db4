package state

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
)

// Phase is where a suspension stands (docs/design.md, Suspension and
// resumption). Every transition is written only after Nomad shows the step
// before it, so a record read by a new leader says what to check in Nomad.
type Phase string

const (
	// PhaseStopping: the record is written, the stop not confirmed.
	PhaseStopping Phase = "stopping"
	// PhaseSuspended: Nomad accepted the service's stop; StopJobModifyIndex
	// is the stop's index and Tag, when Tagged, marks the stopped version.
	PhaseSuspended Phase = "suspended"
	// PhaseResuming: the service is registering the job again.
	PhaseResuming Phase = "resuming"
	// PhaseResumed: the job is registered again (ResumeJobModifyIndex); the
	// record stays while the resume hold lasts and the tag is removed.
	PhaseResumed Phase = "resumed"
)

// valid reports whether p is one of the phases.
func (p Phase) valid() bool {
	switch p {
	case PhaseStopping, PhaseSuspended, PhaseResuming, PhaseResumed:
		return true
	}
	return false
}

// Suspension is the record of one job the service stops to make room. It
// holds everything needed to register the job again, even when Nomad no
// longer knows it: the exact spec of the suspended version.
type Suspension struct {
	Namespace string `json:"namespace"`
	Job       string `json:"job"`
	Project   string `json:"project"`
	Phase     Phase  `json:"phase"`
	Reason    string `json:"reason"`
	// ForWorkload and ForProject name the pending work it made room for.
	ForWorkload string `json:"for_workload"`
	ForProject  string `json:"for_project"`
	// Time is when the suspension was recorded; By the instance.
	Time time.Time `json:"time"`
	By   string    `json:"by,omitempty"`

	// Version and JobModifyIndex are the suspended (running) version's;
	// Groups its task groups' counts.
	Version        uint64         `json:"version"`
	JobModifyIndex uint64         `json:"job_modify_index"`
	Groups         map[string]int `json:"groups"`
	Allocations    []string       `json:"allocations,omitempty"`

	// Tag is the name of the version tag the service puts on the stopped
	// version (it keeps Nomad's garbage collector off the job and tells
	// its owner why in `nomad job history`); Tagged says Nomad accepted
	// it. Both are cleared once the tag is removed after a resume.
	Tag    string `json:"tag"`
	Tagged bool   `json:"tagged"`

	// StopVersion and StopJobModifyIndex are the version the stop made
	// and its index; StoppedAt when the service saw it (PhaseSuspended).
	StopVersion        uint64    `json:"stop_version,omitempty"`
	StopJobModifyIndex uint64    `json:"stop_job_modify_index,omitempty"`
	StoppedAt          time.Time `json:"stopped_at,omitzero"`

	// ResumedAt and ResumeJobModifyIndex are the resume's (PhaseResuming:
	// when it started; PhaseResumed: the registered version's index).
	ResumedAt            time.Time `json:"resumed_at,omitzero"`
	ResumeJobModifyIndex uint64    `json:"resume_job_modify_index,omitempty"`

	// Spec is the suspended version's job spec as JSON, or SpecGzip the
	// same gzipped and base64-encoded when it is large (see EncodeSpec).
	Spec     json.RawMessage `json:"spec,omitempty"`
	SpecGzip string          `json:"spec_gzip,omitempty"`

	// ModifyIndex is the Consul index the record was read at; writes of a
	// read record check it (compare-and-set). Not stored.
	ModifyIndex uint64 `json:"-"`
}

// Key is "namespace/job".
func (s Suspension) Key() string { return s.Namespace + "/" + s.Job }

// gzipAbove is the size of a spec's JSON above which it is stored
// compressed.
const gzipAbove = 16 << 10

// EncodeSpec stores job as the record's spec: JSON, compressed when
// larger than 16 KiB.
func (s *Suspension) EncodeSpec(job *nomadapi.Job) error {
	data, err := json.Marshal(job)
	if err != nil {
		return fmt.Errorf("encoding the spec of %s: %w", s.Key(), err)
	}
	s.Spec, s.SpecGzip = nil, ""
	if len(data) <= gzipAbove {
		s.Spec = data
		return nil
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(data); err != nil {
		return fmt.Errorf("compressing the spec of %s: %w", s.Key(), err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("compressing the spec of %s: %w", s.Key(), err)
	}
	s.SpecGzip = base64.StdEncoding.EncodeToString(buf.Bytes())
	return nil
}

// ErrNoSpec is returned by DecodeSpec for a record without a spec.
var ErrNoSpec = errors.New("the record holds no job spec")

// DecodeSpec returns the recorded job spec. It checks that the spec is of
// the record's job.
func (s Suspension) DecodeSpec() (*nomadapi.Job, error) {
	data := []byte(s.Spec)
	if s.SpecGzip != "" {
		raw, err := base64.StdEncoding.DecodeString(s.SpecGzip)
		if err != nil {
			return nil, fmt.Errorf("spec_gzip of %s is not base64: %w", s.Key(), err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("spec_gzip of %s is not gzip: %w", s.Key(), err)
		}
		if data, err = io.ReadAll(io.LimitReader(zr, 64<<20)); err != nil {
			return nil, fmt.Errorf("spec_gzip of %s: %w", s.Key(), err)
		}
	}
	if len(data) == 0 {
		return nil, ErrNoSpec
	}
	var job nomadapi.Job
	if err := json.Unmarshal(data, &job); err != nil {
		return nil, fmt.Errorf("spec of %s: %w", s.Key(), err)
	}
	if job.ID == nil || *job.ID != s.Job || job.Namespace == nil || *job.Namespace != s.Namespace {
		return nil, fmt.Errorf("spec of %s is of another job (%s/%s)", s.Key(), deref(job.Namespace), deref(job.ID))
	}
	return &job, nil
}

func deref(p *string) string {
	if p == nil {
		return "?"
	}
	return *p
}

// check reports what makes a decoded record unusable.
func (s Suspension) check() error {
	switch {
	case s.Namespace == "" || s.Job == "":
		return errors.New("record names no job or namespace")
	case !s.Phase.valid():
		return fmt.Errorf("phase %q is none of stopping, suspended, resuming, resumed", s.Phase)
	}
	return nil
}

// RecordError is a suspension record the service does not act on, and
// why. Namespace and Job are read from the key.
type RecordError struct {
	Key       string `json:"key"`
	Namespace string `json:"namespace"`
	Job       string `json:"job"`
	Reason    string `json:"reason"`
}

// Error makes a RecordError an error.
func (e RecordError) Error() string { return fmt.Sprintf("suspension record %s: %s", e.Key, e.Reason) }

// ErrRecordTooLarge is returned when a record would exceed the store's
// MaxRecordBytes.
var ErrRecordTooLarge = errors.New("suspension record too large")
