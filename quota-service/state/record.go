package state

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/recordkey"
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
	// Cause is why the plan stopped the job: the name of its
	// plan.Cause ("reclaim", "limit", "gang", "move", "hold"); empty in
	// records written before it was kept, whose Reason says it.
	Cause string `json:"cause,omitempty"`
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
	// StopNonce is written with the record, before the stop, and the
	// stop carries it in the stopped version's meta (gpushare.stop): the
	// proof that a stop Nomad shows is this record's, not its owner's
	// (Nomad shows no author of a stop). Empty in records written before
	// it was kept.
	StopNonce string `json:"stop_nonce,omitempty"`

	// StopVersion and StopJobModifyIndex are the version the stop made
	// and its index; StoppedAt when the service saw it (PhaseSuspended).
	StopVersion        uint64    `json:"stop_version,omitempty"`
	StopJobModifyIndex uint64    `json:"stop_job_modify_index,omitempty"`
	StoppedAt          time.Time `json:"stopped_at,omitzero"`

	// ResumedAt and ResumeJobModifyIndex are the resume's (PhaseResuming:
	// when it started; PhaseResumed: the registered version's index).
	ResumedAt            time.Time `json:"resumed_at,omitzero"`
	ResumeJobModifyIndex uint64    `json:"resume_job_modify_index,omitempty"`

	// SpecSealed is the suspended version's job spec: JSON, gzipped,
	// sealed with the record key (AES-256-GCM bound to the record's
	// namespace and job; package recordkey), so that whoever reads
	// Consul KV does not read the job's environment and templates.
	SpecSealed string `json:"spec_sealed,omitempty"`

	// MAC signs the record with the service's record key (recordkey
	// Sign over the record as JSON with MAC empty): the service acts only
	// on records it can prove it wrote.
	MAC string `json:"mac,omitempty"`

	// ModifyIndex is the Consul index the record was read at; writes of a
	// read record check it (compare-and-set). Not stored.
	ModifyIndex uint64 `json:"-"`
	// SignedWithPrevious says the record verified with a previous key
	// of the ring: the service signs it again with the current one. Not
	// stored.
	SignedWithPrevious bool `json:"-"`
}

// Key is "namespace/job".
func (s Suspension) Key() string { return s.Namespace + "/" + s.Job }

// specContext binds a sealed spec to its record's key: a spec copied
// into another job's record does not open.
func (s Suspension) specContext() []byte { return []byte("spec\x00" + s.Namespace + "\x00" + s.Job) }

// EncodeSpec stores job as the record's spec, gzipped and sealed with the
// current key of keys.
func (s *Suspension) EncodeSpec(job *nomadapi.Job, keys *recordkey.Keyring) error {
	if keys == nil {
		return fmt.Errorf("sealing the spec of %s: %w", s.Key(), ErrNoKeys)
	}
	data, err := json.Marshal(job)
	if err != nil {
		return fmt.Errorf("encoding the spec of %s: %w", s.Key(), err)
	}
	var buf bytes.Buffer
	zw := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(zw)
	zw.Reset(&buf)
	if _, err := zw.Write(data); err != nil {
		return fmt.Errorf("compressing the spec of %s: %w", s.Key(), err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("compressing the spec of %s: %w", s.Key(), err)
	}
	if s.SpecSealed, err = keys.Seal(buf.Bytes(), s.specContext()); err != nil {
		return fmt.Errorf("sealing the spec of %s: %w", s.Key(), err)
	}
	return nil
}

// gzipWriters keeps the compressors of EncodeSpec: each holds about 800
// KB of tables, and the actuator's vet sizes a record for every job it
// judges (11,000 at the first cycle of a 5,000-node cluster; each job
// registered again after), which without reuse was a third of the
// service's allocations (docs/scale.md).
var gzipWriters = sync.Pool{New: func() any { return gzip.NewWriter(io.Discard) }}

// ErrNoKeys is returned when no record key is loaded.
var ErrNoKeys = errors.New("no record key is loaded")

// ErrNoSpec is returned by DecodeSpec for a record without a spec.
var ErrNoSpec = errors.New("the record holds no job spec")

// maxSpecBytes bounds a decompressed spec.
const maxSpecBytes = 64 << 20

// DecodeSpec returns the recorded job spec. It checks that the spec is of
// the record's job.
func (s Suspension) DecodeSpec(keys *recordkey.Keyring) (*nomadapi.Job, error) {
	if s.SpecSealed == "" {
		return nil, ErrNoSpec
	}
	if keys == nil {
		return nil, fmt.Errorf("opening the spec of %s: %w", s.Key(), ErrNoKeys)
	}
	raw, err := keys.Open(s.SpecSealed, s.specContext())
	if err != nil {
		return nil, fmt.Errorf("spec of %s: %w", s.Key(), err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("spec of %s is not gzip: %w", s.Key(), err)
	}
	data, err := io.ReadAll(io.LimitReader(zr, maxSpecBytes))
	if err != nil {
		return nil, fmt.Errorf("spec of %s: %w", s.Key(), err)
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

// signedBytes is what the record's MAC covers: the record as JSON with
// its MAC left out.
func (s Suspension) signedBytes() ([]byte, error) {
	s.MAC = ""
	data, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("encoding the record of %s: %w", s.Key(), err)
	}
	return data, nil
}

// Sign sets the record's MAC with the current key of keys.
func (s *Suspension) Sign(keys *recordkey.Keyring) error {
	if keys == nil {
		return ErrNoKeys
	}
	data, err := s.signedBytes()
	if err != nil {
		return err
	}
	s.MAC = keys.Sign(data)
	return nil
}

// Verify checks the record's MAC against keys and sets
// SignedWithPrevious.
func (s *Suspension) Verify(keys *recordkey.Keyring) error {
	if keys == nil {
		return ErrNoKeys
	}
	data, err := s.signedBytes()
	if err != nil {
		return err
	}
	_, current, err := keys.Verify(data, s.MAC)
	if err != nil {
		return err
	}
	s.SignedWithPrevious = !current
	return nil
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

// Unverified is a record that decoded but that the service cannot prove
// it wrote (Reason says why: unsigned, signed with a key it does not
// hold, or changed). It is never acted on as written: it is reported,
// and only Nomad's own state can replace it (docs/design.md, Suspension
// and resumption).
type Unverified struct {
	Suspension
	Reason string
}

// Records are the suspension and shrink records read from Consul KV.
type Records struct {
	// Shrinks are the shrink records the service proved it wrote;
	// ShrinkErrors those it cannot prove or decode (never acted on).
	Shrinks      []Shrink
	ShrinkErrors []RecordError
	// Verified are the records the service proved it wrote, by time.
	Verified []Suspension
	// Unverified decoded but failed verification.
	Unverified []Unverified
	// Errors did not decode.
	Errors []RecordError
	// Keys verified them; nil when none were read.
	Keys *recordkey.Keyring
}

// RecordError is a suspension record the service does not act on, and
// why. Namespace and Job are read from the key.
type RecordError struct {
	Key       string `json:"key"`
	Namespace string `json:"namespace"`
	Job       string `json:"job"`
	Reason    string `json:"reason"`
	// ModifyIndex is the Consul index of the key, for a record that did
	// not decode (so that a suspension of its job may replace it). Not
	// stored.
	ModifyIndex uint64 `json:"-"`
}

// Error makes a RecordError an error.
func (e RecordError) Error() string { return fmt.Sprintf("suspension record %s: %s", e.Key, e.Reason) }

// ErrRecordTooLarge is returned when a record would exceed the store's
// MaxRecordBytes.
var ErrRecordTooLarge = errors.New("suspension record too large")
