package state

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpushare/nomad-gpushare/quota-service/kvlayout"
	"github.com/gpushare/nomad-gpushare/quota-service/recordkey"
	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"
)

func testJob(ns, id string, metaBytes int) *nomadapi.Job {
	j := nomadapi.NewBatchJob(id, id, "global", 50)
	j.Namespace = &ns
	j.Meta = map[string]string{"blob": strings.Repeat("x", metaBytes)}
	j.AddTaskGroup(nomadapi.NewTaskGroup("g", 2).AddTask(nomadapi.NewTask("t", "raw_exec")))
	return j
}

var testKeys = func() *recordkey.Keyring {
	k, err := recordkey.New(bytes.Repeat([]byte{1}, recordkey.MinKeyBytes))
	if err != nil {
		panic(err)
	}
	return k
}()

// TestSpecRoundTrip: the recorded spec comes back as written, sealed so
// that a reader of Consul KV does not see it, and opens only in its own
// record.
func TestSpecRoundTrip(t *testing.T) {
	for _, size := range []int{10, 200 << 10} {
		rec := Suspension{Namespace: "a", Job: "j", Phase: PhaseStopping}
		if err := rec.EncodeSpec(testJob("a", "j", size), testKeys); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(rec.SpecSealed, "xxxx") {
			t.Fatal("the sealed spec shows the job's meta")
		}
		got, err := rec.DecodeSpec(testKeys)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Meta["blob"]) != size || *got.TaskGroups[0].Count != 2 {
			t.Fatalf("decoded spec differs: meta %d bytes, group %+v", len(got.Meta["blob"]), got.TaskGroups[0])
		}
		moved := rec
		moved.Job = "other"
		if _, err := moved.DecodeSpec(testKeys); err == nil {
			t.Fatal("a spec sealed for a/j opened in the record of a/other")
		}
	}
	rec := Suspension{Namespace: "a", Job: "j"}
	if err := rec.EncodeSpec(testJob("b", "other", 1), testKeys); err != nil {
		t.Fatal(err)
	}
	if _, err := rec.DecodeSpec(testKeys); err == nil || !strings.Contains(err.Error(), "another job") {
		t.Fatalf("spec of another job decoded: %v", err)
	}
}

// TestSignVerify: a record verifies only as the service signed it; any
// change of a field fails it.
func TestSignVerify(t *testing.T) {
	rec := Suspension{Namespace: "a", Job: "j", Phase: PhaseSuspended, Tag: "gpushare-suspended-x", StopJobModifyIndex: 20, Groups: map[string]int{"g": 1}}
	if err := rec.EncodeSpec(testJob("a", "j", 1), testKeys); err != nil {
		t.Fatal(err)
	}
	if err := rec.Sign(testKeys); err != nil {
		t.Fatal(err)
	}
	data, err := encodeSuspension(rec)
	if err != nil {
		t.Fatal(err)
	}
	var back Suspension
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if err := back.Verify(testKeys); err != nil {
		t.Fatalf("the record as stored does not verify: %v", err)
	}
	for name, change := range map[string]func(*Suspension){
		"phase":      func(s *Suspension) { s.Phase = PhaseResuming },
		"tagged":     func(s *Suspension) { s.Tagged = true },
		"stop index": func(s *Suspension) { s.StopJobModifyIndex++ },
		"job":        func(s *Suspension) { s.Job = "k" },
		"groups":     func(s *Suspension) { s.Groups["g"] = 2 },
		"spec":       func(s *Suspension) { s.SpecSealed = s.SpecSealed[:len(s.SpecSealed)-4] + "AAAA" },
		"no MAC":     func(s *Suspension) { s.MAC = "" },
	} {
		changed := back
		changed.Groups = map[string]int{"g": 1}
		change(&changed)
		if err := changed.Verify(testKeys); err == nil {
			t.Errorf("a record with its %s changed verifies", name)
		}
	}
}

// TestDecodeSuspension: a record is used only when it decodes, is
// complete and its key names the job its body names.
func TestDecodeSuspension(t *testing.T) {
	s := &Store{layout: kvlayout.New("gs")}
	tests := []struct {
		key, value string
		want       string // part of the error; "" when it decodes
	}{
		{"gs/suspended/a/j", `{"namespace":"a","job":"j","phase":"suspended"}`, ""},
		{"gs/suspended/a/j", `{"namespace":"a","job":"other","phase":"suspended"}`, "the key names a/j but the record names a/other"},
		{"gs/suspended/b/j", `{"namespace":"a","job":"j","phase":"suspended"}`, "the key names b/j"},
		{"gs/suspended/a/j", `{"namespace":"a","job":"j"}`, "phase"},
		{"gs/suspended/a/j", `{"job":"j","phase":"stopping"}`, "names no job or namespace"},
		{"gs/suspended/a/j", `not json`, "not a suspension record"},
	}
	for _, tt := range tests {
		_, err := s.decodeSuspension(&consulapi.KVPair{Key: tt.key, Value: []byte(tt.value)})
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s = %s: %v", tt.key, tt.value, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Reason, tt.want)):
			t.Errorf("%s = %s: error %v, want %q", tt.key, tt.value, err, tt.want)
		}
	}
}

func FuzzDecodeSuspension(f *testing.F) {
	f.Add("gs/suspended/a/j", `{"namespace":"a","job":"j","phase":"suspended","spec_sealed":"00000000:H4sI","mac":"v1:00:AA"}`)
	f.Add("gs/suspended/a", `{"namespace":"a","job":"","phase":"x"}`)
	s := &Store{layout: kvlayout.New("gs")}
	f.Fuzz(func(t *testing.T, key, value string) {
		rec, err := s.decodeSuspension(&consulapi.KVPair{Key: key, Value: []byte(value)})
		if err == nil {
			_ = rec.Verify(testKeys)
			_, _ = rec.DecodeSpec(testKeys)
		}
	})
}

// BenchmarkEncodeSpec is the record sizing the actuator's vet does for
// every job it judges: allocations per spec show whether the compressor
// is reused.
func BenchmarkEncodeSpec(b *testing.B) {
	job := testJob("a", "j", 2<<10)
	b.ReportAllocs()
	for b.Loop() {
		rec := Suspension{Namespace: "a", Job: "j"}
		if err := rec.EncodeSpec(job, testKeys); err != nil {
			b.Fatal(err)
		}
	}
}
