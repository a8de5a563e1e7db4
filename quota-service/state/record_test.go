package state

import (
	"strings"
	"testing"

	"github.com/gpushare/nomad-gpushare/quota-service/kvlayout"
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

// TestSpecRoundTrip: the recorded spec comes back as written, stored
// plainly when small and compressed when large.
func TestSpecRoundTrip(t *testing.T) {
	for _, size := range []int{10, 200 << 10} {
		rec := Suspension{Namespace: "a", Job: "j", Phase: PhaseStopping}
		if err := rec.EncodeSpec(testJob("a", "j", size)); err != nil {
			t.Fatal(err)
		}
		if compressed := rec.SpecGzip != ""; compressed != (size > gzipAbove) {
			t.Fatalf("meta of %d bytes: compressed %v", size, compressed)
		}
		got, err := rec.DecodeSpec()
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Meta["blob"]) != size || *got.TaskGroups[0].Count != 2 {
			t.Fatalf("decoded spec differs: meta %d bytes, group %+v", len(got.Meta["blob"]), got.TaskGroups[0])
		}
	}
	rec := Suspension{Namespace: "a", Job: "j"}
	if err := rec.EncodeSpec(testJob("b", "other", 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := rec.DecodeSpec(); err == nil || !strings.Contains(err.Error(), "another job") {
		t.Fatalf("spec of another job decoded: %v", err)
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
	f.Add("gs/suspended/a/j", `{"namespace":"a","job":"j","phase":"suspended","spec_gzip":"H4sI"}`)
	f.Add("gs/suspended/a", `{"namespace":"a","job":"","phase":"x"}`)
	s := &Store{layout: kvlayout.New("gs")}
	f.Fuzz(func(t *testing.T, key, value string) {
		rec, err := s.decodeSuspension(&consulapi.KVPair{Key: key, Value: []byte(value)})
		if err == nil {
			_, _ = rec.DecodeSpec()
		}
	})
}
