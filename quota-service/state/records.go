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
	nomadapi "github.com/hashicorp/nomad/api"
)

// DefaultMaxRecordBytes is Consul's default limit on a KV value
// (kv_max_value_size, 512 KiB).
const DefaultMaxRecordBytes = 512 << 10

// RecordLimit is the largest record the store writes: MaxRecordBytes or
// its default.
func (s *Store) RecordLimit() int {
	if s.MaxRecordBytes > 0 {
		return s.MaxRecordBytes
	}
	return DefaultMaxRecordBytes
}

// sizingKeys seal and sign records whose size alone is wanted: a record's
// size does not depend on the key.
var sizingKeys = func() *recordkey.Keyring {
	k, err := recordkey.New(make([]byte, recordkey.MinKeyBytes))
	if err != nil {
		panic(err)
	}
	return k
}()

// RecordSize is the size rec would take as stored with job's spec.
func RecordSize(rec Suspension, job *nomadapi.Job) (int, error) {
	if err := rec.EncodeSpec(job, sizingKeys); err != nil {
		return 0, err
	}
	if err := rec.Sign(sizingKeys); err != nil {
		return 0, err
	}
	data, err := encodeSuspension(rec)
	return len(data), err
}

// keys loads the record keys.
func (s *Store) keys(ctx context.Context) (*recordkey.Keyring, error) {
	if s.Keys == nil {
		return nil, errors.New("no record keys configured")
	}
	ring, err := s.Keys.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("loading the record keys (%s): %w", s.Keys.Describe(), err)
	}
	return ring, nil
}

// seal re-seals rec's spec with the current key when a previous key
// sealed it, so that the spec still opens once that key is retired.
func seal(rec *Suspension, ring *recordkey.Keyring) error {
	if rec.SpecSealed == "" || strings.HasPrefix(rec.SpecSealed, ring.CurrentID()+":") {
		return nil
	}
	job, err := rec.DecodeSpec(ring)
	if err != nil {
		return err
	}
	return rec.EncodeSpec(job, ring)
}

func encodeSuspension(rec Suspension) ([]byte, error) {
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding the record of %s: %w", rec.Key(), err)
	}
	return data, nil
}

// EncodeSuspension is the record as stored. It fails with
// ErrRecordTooLarge when it exceeds RecordLimit.
func (s *Store) EncodeSuspension(rec Suspension) ([]byte, error) {
	data, err := encodeSuspension(rec)
	if err != nil {
		return nil, err
	}
	if max := s.RecordLimit(); len(data) > max {
		return nil, fmt.Errorf("%w: the record of %s takes %d bytes, above the limit of %d (Consul's kv_max_value_size; raise both to suspend this job)",
			ErrRecordTooLarge, rec.Key(), len(data), max)
	}
	return data, nil
}

// PutSuspension writes rec if its key still has the ModifyIndex it was
// read at (0: the key must not exist), and sets rec.ModifyIndex to the new
// index. A record changed meanwhile is not overwritten: the error says so
// and the next cycle reads it again.
func (s *Store) PutSuspension(ctx context.Context, rec *Suspension) error {
	ring, err := s.keys(ctx)
	if err != nil {
		return err
	}
	if err := seal(rec, ring); err != nil {
		return err
	}
	if err := rec.Sign(ring); err != nil {
		return err
	}
	rec.SignedWithPrevious = false
	data, err := s.EncodeSuspension(*rec)
	if err != nil {
		return err
	}
	index, err := s.casPut(ctx, s.layout.Suspension(rec.Namespace, rec.Job), data, rec.ModifyIndex)
	if err != nil {
		return err
	}
	rec.ModifyIndex = index
	return nil
}

// casPut writes value at key if the key still has index (0: it must not
// exist), and returns the key's new modify index.
func (s *Store) casPut(ctx context.Context, key string, value []byte, index uint64) (uint64, error) {
	ops := consulapi.TxnOps{{KV: &consulapi.KVTxnOp{Verb: consulapi.KVCAS, Key: key, Value: value, Index: index}}}
	ok, resp, _, err := s.txn.Txn(ops, (&consulapi.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return 0, fmt.Errorf("writing Consul key %s: %w (is Consul reachable and the token allowed to write it?)", key, err)
	}
	if !ok || len(resp.Results) != 1 || resp.Results[0].KV == nil {
		return 0, fmt.Errorf("writing Consul key %s: it changed since it was read at index %d; not overwriting it", key, index)
	}
	return resp.Results[0].KV.ModifyIndex, nil
}

// CloseSuspension deletes rec's record, if it still has the ModifyIndex it
// was read at, and appends e to the history, in one transaction: a record
// is never gone without the history saying why.
func (s *Store) CloseSuspension(ctx context.Context, rec Suspension, e Entry) error {
	return s.closeWith(ctx, s.layout.Suspension(rec.Namespace, rec.Job), rec.ModifyIndex, e)
}

// closeWith deletes key, if it still has index, and appends e to the
// history, in one transaction.
func (s *Store) closeWith(ctx context.Context, key string, index uint64, e Entry) error {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	entry, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the history entry of %s: %w", key, err)
	}
	ops := consulapi.TxnOps{
		{KV: &consulapi.KVTxnOp{Verb: consulapi.KVDeleteCAS, Key: key, Index: index}},
		{KV: &consulapi.KVTxnOp{Verb: consulapi.KVSet, Key: s.historyKey(e), Value: entry}},
	}
	ok, _, _, err := s.txn.Txn(ops, (&consulapi.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("deleting Consul key %s: %w (is Consul reachable and the token allowed to write it?)", key, err)
	}
	if !ok {
		return fmt.Errorf("deleting Consul key %s: it changed since it was read at index %d; not deleting it", key, index)
	}
	return s.trimHistory(ctx)
}

// Suspensions lists all suspension records. Those the service proves it
// wrote are Verified, sorted by time; those that decode but do not verify
// are Unverified; a record that does not decode, is incomplete, or whose
// key does not name the job its body names is in Errors.
func (s *Store) Suspensions(ctx context.Context) (Records, error) {
	ring, err := s.keys(ctx)
	if err != nil {
		return Records{}, err
	}
	prefix := s.layout.Suspended()
	// Consistent: a Consul leader elected a moment ago may answer a
	// default read before it has applied its log (an empty folder after
	// a restart), and a missing record is a decision (see Consistent).
	pairs, _, err := s.kv.List(prefix, Consistent(ctx))
	if err != nil {
		return Records{}, fmt.Errorf("listing Consul prefix %s: %w", prefix, err)
	}
	out := Records{Keys: ring}
	for _, p := range pairs {
		if strings.HasSuffix(p.Key, "/") {
			continue
		}
		rec, rerr := s.decodeSuspension(p)
		if rerr != nil {
			out.Errors = append(out.Errors, *rerr)
			continue
		}
		if err := rec.Verify(ring); err != nil {
			out.Unverified = append(out.Unverified, Unverified{Suspension: rec, Reason: err.Error()})
			continue
		}
		out.Verified = append(out.Verified, rec)
	}
	sort.Slice(out.Verified, func(i, j int) bool { return out.Verified[i].Time.Before(out.Verified[j].Time) })
	return out, nil
}

// decodeSuspension reads one record and checks it against its key.
func (s *Store) decodeSuspension(p *consulapi.KVPair) (Suspension, *RecordError) {
	ns, job, _ := strings.Cut(strings.TrimPrefix(p.Key, s.layout.Suspended()), "/")
	bad := func(format string, args ...any) *RecordError {
		return &RecordError{Key: p.Key, Namespace: ns, Job: job, ModifyIndex: p.ModifyIndex, Reason: fmt.Sprintf(format, args...) +
			"; the service does not act on it: check the job in Nomad, then delete the key"}
	}
	var rec Suspension
	if err := json.Unmarshal(p.Value, &rec); err != nil {
		return rec, bad("not a suspension record: %v", err)
	}
	if err := rec.check(); err != nil {
		return rec, bad("%v", err)
	}
	if rec.Namespace != ns || rec.Job != job {
		return rec, bad("the key names %s/%s but the record names %s", ns, job, rec.Key())
	}
	rec.ModifyIndex = p.ModifyIndex
	return rec, nil
}

// PutRecordErrors writes one status key per record the service does not
// act on (<root>/status/record-errors/<namespace>/<job>) and deletes the
// others.
func (s *Store) PutRecordErrors(ctx context.Context, errs []RecordError) error {
	keep := map[string]bool{}
	for _, e := range errs {
		key := s.layout.RecordError(e.Namespace, e.Job)
		keep[key] = true
		if err := s.put(ctx, key, e); err != nil {
			return err
		}
	}
	keys, _, err := s.kv.Keys(s.layout.RecordErrors(), "", Consistent(ctx))
	if err != nil {
		return fmt.Errorf("listing Consul prefix %s: %w", s.layout.RecordErrors(), err)
	}
	for _, k := range keys {
		if !keep[k] {
			if _, err := s.kv.Delete(k, (&consulapi.WriteOptions{}).WithContext(ctx)); err != nil {
				return fmt.Errorf("deleting Consul key %s: %w", k, err)
			}
		}
	}
	return nil
}
