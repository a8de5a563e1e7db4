package nomadwatch

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/recordkey"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	nomadapi "github.com/hashicorp/nomad/api"
)

// Verdict is what a suspension record means given what Nomad shows of its
// job (docs/design.md, Suspension and resumption). The actuator acts on a
// record only through its verdict.
type Verdict int

const (
	// Unfinished: recorded, not stopped; the job runs at the recorded
	// version. It is stopped only if the current plan suspends it.
	Unfinished Verdict = iota + 1
	// StopLanded: recorded as stopping, and Nomad shows the service's
	// stop (a leader stopped before it marked the record): to mark
	// suspended. Resumable.
	StopLanded
	// Suspended: stopped by the service. Resumable.
	Suspended
	// Vanished: stopped by the service without a version tag (tagging
	// failed), then removed by Nomad's garbage collector. Resumable from
	// the record's spec.
	Vanished
	// ResumeLanded: recorded as resuming, and Nomad shows the job
	// registered again: to mark resumed.
	ResumeLanded
	// Resumed: registered again by the service; the record holds the
	// resume hold and the tag to remove.
	Resumed
	// Closed: the record is done (Event says why: the owner's word, a
	// suspension abandoned, a job running again); to delete.
	Closed
	// Rejected: Nomad's state does not corroborate the record; it is
	// reported and never acted on.
	Rejected
	// Rebuild: Nomad shows the job stopped under the service's tag, and
	// the record at its key is missing, cannot be verified, or is older
	// than that stop: the record is written again from Nomad's state
	// (Rebuilt), and the job resumes in its turn.
	Rebuild
	// Rescaled: the owner scaled the suspended job (Nomad keeps a scaled
	// stopped job stopped, at a new version with other counts): the
	// record is to take that version, which the job resumes at.
	Rescaled
	// Unconfirmed: the suspended job changed while stopped, to other
	// counts, and no scaling event names its new version yet (Nomad
	// writes a scale's event after its version): the record is left
	// untouched, and the job is not
	// resumed, until an event does (Rescaled) or ScaleEventWindow has
	// passed since the version was submitted (the owner's stop).
	Unconfirmed
)

// ScaleEventWindow bounds how long after a suspended job's new version
// was submitted the service waits for the scaling event that would make
// it the owner's scale rather than the owner's stop. The soak saw the
// event come more than the 1 s readScaledAt waits for, on a loaded
// machine, and the record closed as the owner's stop: the job was lost.
const ScaleEventWindow = 30 * time.Second

// StopAdoptWindow bounds how long after a record was written a stop that
// carries no tag of the service is taken as the service's own (a leader
// that died between the stop and the tag): the stop must have made exactly
// one version after the recorded one, within this window.
const StopAdoptWindow = 10 * time.Minute

// MetaStopNonce is the job meta key the service's stop sets to its
// record's StopNonce (Record.stopping).
const MetaStopNonce = "gpushare.stop"

// TagPrefix starts the name of every version tag the service puts on a
// suspended job; it removes no other tag.
const TagPrefix = "gpushare-suspended-"

// Record is a suspension record with what Nomad shows of its job.
type Record struct {
	state.Suspension
	Verdict Verdict
	// Event, for Closed, is the history event that closes it.
	Event state.Event
	// Why explains the verdict to a person.
	Why string
	// Current is Nomad's job now; nil when Nomad no longer knows it.
	Current *nomadapi.Job
	// Spec, for Vanished, is the record's spec, to register.
	Spec *nomadapi.Job
	// Rebuilt, for Rebuild, is the record to write (its ModifyIndex the
	// key's, for the compare-and-set); Retag says the tag on the stopped
	// version carries no proof the current keys verify, so it is put
	// again with one.
	Rebuilt *state.Suspension
	Retag   bool
	// scaledAt are the times (Unix ns) of the job's scaling events, read
	// only for a suspended job that moved while stopped (Inputs.ScaledAt).
	scaledAt []int64
}

// Resumable says the record's job waits to be resumed.
func (r *Record) Resumable() bool {
	return r.Verdict == Suspended || r.Verdict == StopLanded || r.Verdict == Vanished
}

// classifyRecords gives every suspension record its verdict, adds the
// records not acted on to RecordErrors (their Key is left for the caller,
// who knows the KV layout), and makes vanished jobs known to the view
// (they are pending work).
func (a *assembler) classifyRecords() {
	a.v.RecordErrors = append(a.v.RecordErrors, a.in.RecordErrors...)
	for _, rec := range a.in.Suspensions {
		key := rec.Key()
		r := a.classify(rec)
		if r == nil {
			continue
		}
		if r.Verdict == Rejected {
			a.reportRecord(rec, r.Why+"; the service does not act on it: check the job in Nomad, then delete the key")
		}
		if r.Verdict == Vanished {
			a.addVanishedJob(r)
		}
		a.v.Records[key] = r
	}
	for _, u := range a.in.Unverified {
		a.classifyUnverified(u)
	}
	for _, e := range a.in.RecordErrors {
		// A key that does not decode is not the service's record either:
		// it holds nothing back.
		if key := Key(e.Namespace, e.Job); e.Namespace != "" && e.Job != "" && a.v.Records[key] == nil {
			if _, seen := a.v.Unverified[key]; !seen {
				a.v.Unverified[key] = e.ModifyIndex
			}
		}
	}
	a.adoptTagged()
	sort.Slice(a.v.RecordErrors, func(i, j int) bool { return a.v.RecordErrors[i].Key < a.v.RecordErrors[j].Key })
}

// reportRecord lists rec's key among the records not acted on.
func (a *assembler) reportRecord(rec state.Suspension, reason string) {
	a.v.RecordErrors = append(a.v.RecordErrors, state.RecordError{Key: "", Namespace: rec.Namespace, Job: rec.Job, Reason: reason})
}

// classifyUnverified reports a record the service cannot prove it wrote
// and never acts on it as written. Only Nomad's state replaces it: when
// Nomad shows the job stopped under the service's proven tag, or under
// the very tag and stop the record names (a lost key, or a record from
// before records were signed), the record is rebuilt from Nomad.
func (a *assembler) classifyUnverified(u state.Unverified) {
	key := u.Key()
	job := a.in.Specs[key]
	if job == nil {
		job = a.in.Tagged[key]
	}
	proven := job != nil && a.tagProven(job)
	corroborated := job != nil && stopped(job) && ownTagName(job) && job.VersionTag.Name == u.Tag &&
		jobModifyIndex(job) == u.StopJobModifyIndex && (u.Phase == state.PhaseSuspended || u.Phase == state.PhaseResuming)
	if !proven && !corroborated {
		// Not a record of the service's: no hold, no verdict; a
		// suspension of the job may overwrite the key.
		a.v.Unverified[key] = u.ModifyIndex
		a.reportRecord(u.Suspension, "the service cannot prove it wrote this record: "+u.Reason+
			"; it does not act on it. If the service suspended the job, Nomad shows it stopped under a tag named "+TagPrefix+"...: `nomad job start` runs it; then delete the key")
		return
	}
	r := &Record{Suspension: state.Suspension{Namespace: u.Namespace, Job: u.Job, ModifyIndex: u.ModifyIndex}, Current: job}
	a.v.Records[key] = r
	a.rebuild(r, job, u.ModifyIndex, !proven, "the record at its key could not be verified: "+u.Reason)
	a.reportRecord(u.Suspension, "the service cannot prove it wrote this record: "+u.Reason+
		"; Nomad shows the job stopped under the service's tag "+job.VersionTag.Name+", so the record is written again from Nomad's state")
}

// adoptTagged rebuilds the record of every stopped job that carries the
// service's proven tag and that no record names (a deleted record), and
// reports by name those whose tag it cannot prove.
func (a *assembler) adoptTagged() {
	for _, key := range slices.Sorted(maps.Keys(a.in.Tagged)) {
		if _, named := a.v.Records[key]; named {
			continue
		}
		// A key holding what the service cannot use (it does not verify
		// or does not decode) was reported already; it is replaced.
		index, reported := a.v.Unverified[key]
		job := a.in.Tagged[key]
		if job == nil || job.VersionTag == nil {
			continue // not tagged after all: nothing to adopt
		}
		rec := state.Suspension{Namespace: deref(job.Namespace), Job: deref(job.ID), Tag: job.VersionTag.Name}
		if !a.tagProven(job) {
			if !reported {
				a.reportRecord(rec, fmt.Sprintf("Nomad's job %s is stopped under a tag named like the service's (%s), but the service holds no record of it and cannot prove the tag is its own, so it does not resume it: `nomad job start` runs it, or remove the tag (`nomad job tag unset`)", key, rec.Tag))
			}
			continue
		}
		delete(a.v.Unverified, key)
		r := &Record{Suspension: rec, Current: job}
		why := "no record at its key"
		if reported {
			why = "the record at its key cannot be used"
		}
		a.rebuild(r, job, index, false, why)
		a.v.Records[key] = r
	}
}

// tagForProject reads the project the GPUs went to from a tag TagName
// made ("for-<project>-<time>"); "" for another tag. Projects with
// characters TagName replaces read as it wrote them.
func tagForProject(tag string) string {
	rest, ok := strings.CutPrefix(tag, TagPrefix+"for-")
	if i := strings.LastIndex(rest, "-"); ok && i > 0 {
		return rest[:i]
	}
	return ""
}

// ownTagName says the job's current version carries a tag named like the
// service's.
func ownTagName(job *nomadapi.Job) bool {
	return job.VersionTag != nil && strings.HasPrefix(job.VersionTag.Name, TagPrefix)
}

// tagProven says the job is stopped and its current version carries a
// tag the service can prove it put there (recordkey.TagProven: the proof
// in the description names this job, this version and this tag).
func (a *assembler) tagProven(job *nomadapi.Job) bool {
	return a.in.Keys != nil && stopped(job) && ownTagName(job) &&
		a.in.Keys.TagProven(job.VersionTag.Description, deref(job.Namespace), deref(job.ID), jobVersion(job), job.VersionTag.Name)
}

// rebuild makes r a Rebuild of its job's suspension from what Nomad
// shows: the stopped version and its tag. The version before the stop is
// the one resumed.
func (a *assembler) rebuild(r *Record, job *nomadapi.Job, modifyIndex uint64, retag bool, why string) {
	if !usesGPUs(job) {
		r.reject("Nomad's job %s asks for no GPUs: the service never suspends such a job", r.Key())
		return
	}
	stoppedAt := a.in.Now
	if job.SubmitTime != nil {
		stoppedAt = time.Unix(0, *job.SubmitTime)
	}
	rec := &state.Suspension{Namespace: deref(job.Namespace), Job: deref(job.ID),
		Project: a.resolver.Project(deref(job.Namespace), job.Meta), Phase: state.PhaseSuspended,
		Reason: "rebuilt from Nomad's tagged version " + job.VersionTag.Name + " (" + why + ")",
		Time:   stoppedAt, Groups: map[string]int{}, Tag: job.VersionTag.Name, Tagged: true,
		StopVersion: jobVersion(job), StopJobModifyIndex: jobModifyIndex(job), StoppedAt: stoppedAt, ModifyIndex: modifyIndex}
	if v := jobVersion(job); v > 0 {
		rec.Version = v - 1
	}
	rec.ForProject = tagForProject(rec.Tag)
	for _, tg := range job.TaskGroups {
		if tg.Name != nil && tg.Count != nil {
			rec.Groups[*tg.Name] = *tg.Count
		}
	}
	r.Rebuilt, r.Retag, r.Current = rec, retag, job
	r.set(Rebuild, "Nomad shows the job stopped under the service's tag %s, and %s: the record is written again from Nomad's state", rec.Tag, why)
}

// classify reads one record against Nomad's job. Nil means the job cannot
// be read (an ACL refusal is no proof of absence): the record is reported
// and kept.
func (a *assembler) classify(rec state.Suspension) *Record {
	key := rec.Key()
	r := &Record{Suspension: rec, Current: a.in.Specs[key], scaledAt: a.in.ScaledAt[key]}
	if err, unlisted := a.in.Unlisted[key]; unlisted && err != nil {
		a.v.RecordErrors = append(a.v.RecordErrors, state.RecordError{Key: "", Namespace: rec.Namespace, Job: rec.Job,
			Reason: fmt.Sprintf("the job cannot be read (%v); the record is kept untouched until it can", err)})
		return nil
	}
	if r.Current != nil && rec.Phase != state.PhaseResumed && !usesGPUs(r.Current) {
		return r.reject("Nomad's job %s asks for no GPUs: the service never suspends such a job", key)
	}
	if job := r.Current; job != nil && a.tagProven(job) && job.VersionTag.Name != rec.Tag {
		// The record is older than the stop Nomad shows (replayed, or
		// left behind): Nomad's proven tag is the evidence.
		a.rebuild(r, job, rec.ModifyIndex, false, fmt.Sprintf("the record at its key names an older suspension (tag %s)", rec.Tag))
		return r
	}
	switch rec.Phase {
	case state.PhaseStopping:
		r.stopping()
	case state.PhaseSuspended:
		r.suspended(false, a.in.Now)
	case state.PhaseResuming:
		r.suspended(true, a.in.Now)
	case state.PhaseResumed:
		r.resumed()
	}
	if r.Verdict == Vanished {
		r.vanished(a.in.Keys)
	}
	return r
}

func (r *Record) set(v Verdict, format string, args ...any) {
	r.Verdict, r.Why = v, fmt.Sprintf(format, args...)
}

func (r *Record) close(e state.Event, format string, args ...any) {
	r.set(Closed, format, args...)
	r.Event = e
}

func (r *Record) reject(format string, args ...any) *Record {
	r.set(Rejected, format, args...)
	return r
}

// stopping: the record was written; did the stop happen?
func (r *Record) stopping() {
	job := r.Current
	switch {
	case job == nil:
		r.close(state.EventSuspendAbandoned, "the job left Nomad before the service stopped it")
	case !stopped(job) && jobModifyIndex(job) == r.JobModifyIndex:
		r.set(Unfinished, "recorded but not stopped; the job runs at the recorded version %d", r.Version)
	case !stopped(job):
		r.close(state.EventSuspendAbandoned, "the job changed since the record (job modify index %d, recorded %d); not stopping it", jobModifyIndex(job), r.JobModifyIndex)
	case r.hasOurTag(job):
		r.set(StopLanded, "stopped by the service (its tag %s is on the current version)", r.Tag)
	case r.StopNonce != "" && job.Meta[MetaStopNonce] == r.StopNonce && jobVersion(job) == r.Version+1:
		r.set(StopLanded, "stopped by the service (the stopped version carries this record's nonce)")
	case r.StopNonce != "":
		// The stop is not the one this record was written for: its
		// owner's, landed between the plan and the service's stop.
		r.close(state.EventSuspendAbandoned, "the job was stopped, not by the service (the stopped version %d does not carry this record's nonce); it stays stopped", jobVersion(job))
	case jobVersion(job) == r.Version+1 && r.stoppedInWindow(job):
		// A record written before stops carried a nonce.
		r.set(StopLanded, "stopped right after the record (version %d, the one after the recorded %d)", jobVersion(job), r.Version)
	default:
		r.close(state.EventSuspendAbandoned, "the job was stopped, not by the service (version %d, recorded %d)", jobVersion(job), r.Version)
	}
}

// suspended: the service stopped the job; did its owner act since?
// resuming says a resume was started (it may have landed); now is when
// Nomad was read. A scale (or one that may be) of a job still stopped
// counts in either phase: a scale leaves a running job running, so the
// job never ran after a resume (the soak: the owner scaled a job while its
// resume was refused for the job's changed modify index, and the record
// closed as the owner's stop).
func (r *Record) suspended(resuming bool, now time.Time) {
	job := r.Current
	switch {
	case job == nil && r.Tagged:
		r.close(state.EventOwnerPurged, "the job was purged (Nomad's garbage collector keeps tagged jobs, so its owner did it); suspension cancelled")
	case job == nil:
		// The spec is read by classify (vanished).
		r.set(Vanished, "")
	case !stopped(job) && resuming:
		r.set(ResumeLanded, "registered again by the service's resume")
	case !stopped(job):
		r.close(state.EventSuperseded, "the owner registered the job again (version %d); it runs under the normal rules", jobVersion(job))
	case jobModifyIndex(job) != r.StopJobModifyIndex && r.scaledByOwner(job):
		r.set(Rescaled, "the owner scaled the suspended job (version %d); it stays suspended and resumes at the new counts", jobVersion(job))
	case jobModifyIndex(job) != r.StopJobModifyIndex && r.scaleEventMayCome(job, now):
		r.set(Unconfirmed, "the job changed while stopped (job modify index %d, the service's stop %d) and no scaling event names version %d yet; the record waits for one up to %s after the version was submitted, then takes the change for its owner's stop",
			jobModifyIndex(job), r.StopJobModifyIndex, jobVersion(job), ScaleEventWindow)
	case jobModifyIndex(job) != r.StopJobModifyIndex:
		r.close(state.EventOwnerStopped, "the job was stopped again or changed while stopped (job modify index %d, the service's stop %d); it stays stopped", jobModifyIndex(job), r.StopJobModifyIndex)
	case r.Tagged && !r.hasOurTag(job):
		r.close(state.EventOwnerStopped, "the service's tag %s was removed from the stopped version; it stays stopped", r.Tag)
	default:
		r.set(Suspended, "stopped by the service at job modify index %d", r.StopJobModifyIndex)
	}
}

// vanished: an untagged suspended job Nomad no longer knows (collected by
// its garbage collector) comes back from the record's spec.
func (r *Record) vanished(keys *recordkey.Keyring) {
	if keys == nil {
		r.reject("the job is gone from Nomad and no record key is loaded to open the record's spec")
		return
	}
	spec, err := r.DecodeSpec(keys)
	switch {
	case err != nil:
		r.reject("the job is gone from Nomad and the record cannot bring it back: %v", err)
	case !usesGPUs(spec):
		r.reject("the job is gone from Nomad and the record's spec asks for no GPUs")
	default:
		r.Spec = spec
		r.set(Vanished, "Nomad no longer knows the job (collected while untagged); it comes back from the record's spec")
	}
}

// resumed: the service registered the job again.
func (r *Record) resumed() {
	job := r.Current
	switch {
	case job == nil:
		r.close(state.EventRunningAgain, "the job left Nomad after its resume")
	case stopped(job) || jobModifyIndex(job) != r.ResumeJobModifyIndex:
		r.close(state.EventRunningAgain, "the owner changed the job after its resume")
	case job.Status != nil && *job.Status == "dead":
		r.close(state.EventRunningAgain, "the job finished after its resume; no hold is left to keep")
	default:
		r.set(Resumed, "resumed by the service at job modify index %d", r.ResumeJobModifyIndex)
	}
}

// scaledByOwner says the job's current version, at or after the
// service's stop, was made by a scale: Nomad stamps what a scale registers
// with the scaling event's time as its submit time, and a later stop or
// register is another submission. A scale to the same count makes no new
// version: the version is still one a scale made. (Equal times, not
// order, so servers' clocks need not agree.)
func (r *Record) scaledByOwner(job *nomadapi.Job) bool {
	return job.SubmitTime != nil && slices.Contains(r.scaledAt, *job.SubmitTime) && jobVersion(job) >= r.StopVersion
}

// scaleEventMayCome says job's current version may be a scale whose
// event is still to be written: its counts differ from the record's (a
// stop keeps them), and it was submitted less than ScaleEventWindow before
// now (the servers' clock against the service's; a skew only shortens or
// lengthens the wait).
func (r *Record) scaleEventMayCome(job *nomadapi.Job, now time.Time) bool {
	return job.SubmitTime != nil && jobVersion(job) >= r.StopVersion && r.countsDiffer(job) &&
		now.Sub(time.Unix(0, *job.SubmitTime)) < ScaleEventWindow
}

// countsDiffer says a task group of job has another count than the
// record's.
func (r *Record) countsDiffer(job *nomadapi.Job) bool {
	for _, tg := range job.TaskGroups {
		if tg.Name != nil && tg.Count != nil && r.Groups[*tg.Name] != *tg.Count {
			return true
		}
	}
	return false
}

// hasOurTag says job's current version carries the record's tag (by name).
func (r *Record) hasOurTag(job *nomadapi.Job) bool {
	return r.Tag != "" && job.VersionTag != nil && job.VersionTag.Name == r.Tag
}

// stoppedInWindow says the current version was submitted (stops set the
// submit time) after the record and within StopAdoptWindow of it.
func (r *Record) stoppedInWindow(job *nomadapi.Job) bool {
	if job.SubmitTime == nil {
		return false
	}
	at := time.Unix(0, *job.SubmitTime)
	return !at.Before(r.Time.Add(-time.Second)) && at.Before(r.Time.Add(StopAdoptWindow))
}

// addVanishedJob makes a vanished job known to the view, from its spec.
func (a *assembler) addVanishedJob(r *Record) {
	spec := r.Spec
	info := &JobInfo{Namespace: r.Namespace, ID: r.Job, Stop: true, Status: "dead", Groups: map[string]int{},
		Project: a.resolver.Project(r.Namespace, spec.Meta), Preemptible: jobPreemptible(spec.Meta)}
	if spec.Priority != nil {
		info.Priority = *spec.Priority
	}
	for _, tg := range spec.TaskGroups {
		if tg.Name != nil && tg.Count != nil {
			info.Groups[*tg.Name] = *tg.Count
		}
	}
	a.v.Jobs[r.Key()] = info
	if a.fresh != nil {
		a.fresh[r.Key()] = true
	}
	a.vanished = append(a.vanished, r.Key())
}

// usesGPUs says some task group of job asks for GPUs of either family.
func usesGPUs(job *nomadapi.Job) bool {
	for _, tg := range job.TaskGroups {
		if _, ok, _ := GroupAsk(tg, 1); ok {
			return true
		}
	}
	return false
}

func stopped(job *nomadapi.Job) bool { return job.Stop != nil && *job.Stop }

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func jobVersion(job *nomadapi.Job) uint64 {
	if job.Version == nil {
		return 0
	}
	return *job.Version
}

func jobModifyIndex(job *nomadapi.Job) uint64 {
	if job.JobModifyIndex == nil {
		return 0
	}
	return *job.JobModifyIndex
}

// TagName is the version tag the service puts on a job it suspends at t;
// reason says who took the GPUs ("for-<project>", or "limit-of-<project>"
// for a suspension that holds a project to its limit; "gang-of-" and
// "held-of-<project>" for a gang waiting whole and queued work held from
// a room). Only letters,
// digits, '.', '_' and '-' are kept: Nomad takes the name in a URL path.
func TagName(reason string, t time.Time) string {
	clean := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '-'
	}, reason)
	if len(clean) > 72 {
		clean = clean[:72]
	}
	return TagPrefix + clean + "-" + t.UTC().Format("20060102T150405Z")
}
