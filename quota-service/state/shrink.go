package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/recordkey"
	consulapi "github.com/hashicorp/consul/api"
)

// ShrinkPhase is where a shrink stands.
type ShrinkPhase string

const (
	// ShrinkScaling: the record is written and a scale of the job, from
	// the recorded job modify index, may be in flight.
	ShrinkScaling ShrinkPhase = "scaling"
	// ShrinkHeld: Nomad shows the job as the service's last scale left it
	// (the recorded job modify index).
	ShrinkHeld ShrinkPhase = "shrunk"
)

// ShrunkGroup is one elastic group the service shrank: the count its
// owner gave it and the count it runs at (the target of a scale in
// flight, in phase ShrinkScaling).
type ShrunkGroup struct {
	Count int `json:"count"`
	Now   int `json:"now"`
}

// Shrink is the record of the elastic groups of one job that the service
// scaled down (docs/design.md, Gangs and elastic groups), stored at
// kvlayout.ShrinkRecord, signed like a suspension record. The owner's
// word wins: once Nomad shows the job at another modify index than the
// record's (the owner registered, scaled, stopped or purged it), the
// claim ends and the groups keep the count they have.
type Shrink struct {
	Namespace string      `json:"namespace"`
	Job       string      `json:"job"`
	Project   string      `json:"project"`
	Phase     ShrinkPhase `json:"phase"`
	// Groups are the shrunk groups by name.
	Groups map[string]ShrunkGroup `json:"groups"`
	// JobModifyIndex and Version are the job as the service's last scale
	// left it (ShrinkHeld), or as it was before the scale in flight
	// (ShrinkScaling).
	JobModifyIndex uint64 `json:"job_modify_index"`
	Version        uint64 `json:"version"`
	Reason         string `json:"reason"`
	// ForWorkload is the pending work the last shrink made room for.
	ForWorkload string    `json:"for_workload,omitempty"`
	Time        time.Time `json:"time"`
	By          string    `json:"by,omitempty"`
	MAC         string    `json:"mac,omitempty"`
	// ModifyIndex is the Consul index the record was read or written at.
	ModifyIndex uint64 `json:"-"`
}

// Key is the record's job, "namespace/job".
func (s Shrink) Key() string { return s.Namespace + "/" + s.Job }

// Shrunk is the number of instances the service took from group.
func (s Shrink) Shrunk(group string) int {
	g := s.Groups[group]
	return max(g.Count-g.Now, 0)
}

func (s Shrink) signedBytes() ([]byte, error) {
	s.MAC = ""
	data, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("encoding the shrink record of %s: %w", s.Key(), err)
	}
	return data, nil
}

// check reports what makes a decoded shrink record unusable.
func (s Shrink) check() error {
	switch {
	case s.Namespace == "" || s.Job == "":
		return errors.New("record names no job or namespace")
	case s.Phase != ShrinkScaling && s.Phase != ShrinkHeld:
		return fmt.Errorf("phase %q is neither %s nor %s", s.Phase, ShrinkScaling, ShrinkHeld)
	}
	for name, g := range s.Groups {
		if g.Now < 0 || g.Now > g.Count {
			return fmt.Errorf("group %q: now %d is outside 0..count %d", name, g.Now, g.Count)
		}
	}
	return nil
}

// PutShrink signs rec and writes it if its key still has rec.ModifyIndex
// (0: the key must not exist), then sets rec.ModifyIndex.
func (s *Store) PutShrink(ctx context.Context, rec *Shrink) error {
	ring, err := s.keys(ctx)
	if err != nil {
		return err
	}
	data, err := rec.signedBytes()
	if err != nil {
		return err
	}
	rec.MAC = ring.Sign(data)
	value, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the shrink record of %s: %w", rec.Key(), err)
	}
	key := s.layout.ShrinkRecord(rec.Namespace, rec.Job)
	index, err := s.casPut(ctx, key, value, rec.ModifyIndex)
	if err != nil {
		return err
	}
	rec.ModifyIndex = index
	return nil
}

// CloseShrink deletes rec's record, if it still has rec.ModifyIndex, and
// appends e to the history, in one transaction.
func (s *Store) CloseShrink(ctx context.Context, rec Shrink, e Entry) error {
	return s.closeWith(ctx, s.layout.ShrinkRecord(rec.Namespace, rec.Job), rec.ModifyIndex, e)
}

// Shrinks lists the shrink records the service proves it wrote, sorted by
// time; the others are returned as record errors (never acted on).
func (s *Store) Shrinks(ctx context.Context) ([]Shrink, []RecordError, error) {
	ring, err := s.keys(ctx)
	if err != nil {
		return nil, nil, err
	}
	prefix := s.layout.Shrunk()
	pairs, _, err := s.kv.List(prefix, Consistent(ctx))
	if err != nil {
		return nil, nil, fmt.Errorf("listing Consul prefix %s: %w", prefix, err)
	}
	var out []Shrink
	var bad []RecordError
	for _, p := range pairs {
		if strings.HasSuffix(p.Key, "/") {
			continue
		}
		rec, err := decodeShrink(p, prefix, ring)
		if err != nil {
			ns, job, _ := strings.Cut(strings.TrimPrefix(p.Key, prefix), "/")
			bad = append(bad, RecordError{Key: p.Key, Namespace: ns, Job: job, ModifyIndex: p.ModifyIndex,
				Reason: err.Error() + "; the service does not act on it (the group keeps its count): delete the key"})
			continue
		}
		out = append(out, rec)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out, bad, nil
}

// decodeShrink reads and verifies one shrink record against its key.
func decodeShrink(p *consulapi.KVPair, prefix string, ring *recordkey.Keyring) (Shrink, error) {
	var rec Shrink
	if err := json.Unmarshal(p.Value, &rec); err != nil {
		return rec, fmt.Errorf("not a shrink record: %w", err)
	}
	if err := rec.check(); err != nil {
		return rec, err
	}
	if ns, job, _ := strings.Cut(strings.TrimPrefix(p.Key, prefix), "/"); rec.Namespace != ns || rec.Job != job {
		return rec, fmt.Errorf("the key names %s/%s but the record names %s", ns, job, rec.Key())
	}
	data, err := rec.signedBytes()
	if err != nil {
		return rec, err
	}
	if _, _, err := ring.Verify(data, rec.MAC); err != nil {
		return rec, fmt.Errorf("the service cannot prove it wrote this record: %w", err)
	}
	rec.ModifyIndex = p.ModifyIndex
	return rec, nil
}
