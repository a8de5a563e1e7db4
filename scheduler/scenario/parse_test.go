package scenario

import (
	"errors"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseErrorsNameFileLineAndField(t *testing.T) {
	const head = "node n1 gpus 4 model A100\nproject a guaranteed 1\n"
	tests := []struct {
		name  string
		text  string
		line  int
		field string
		err   error
	}{
		{"missing guarantee", "node n1 gpus 2\nproject a priority 3\n", 2, "guaranteed", ErrMissing},
		{"missing gpus on node", "node n1 model A100\n", 1, "gpus", ErrMissing},
		{"missing project", head + "pending j gpus 1\n", 3, "project", ErrMissing},
		{"missing ask", head + "pending j project a\n", 3, "gpus", ErrMissing},
		{"missing binding", head + "run j project a gpus 1 node n1\n", 3, "gpu", ErrMissing},
		{"unknown model", head + "pending j project a gpus 1 model H100\n", 3, "model", ErrUnknown},
		{"unknown project", head + "pending j project zz gpus 1\n", 3, "project", ErrUnknown},
		{"unknown node", head + "run j project a gpus 1 node n9 gpu 0\n", 3, "node", ErrUnknown},
		{"negative gpus", head + "pending j project a gpus -1\n", 3, "gpus", ErrBadValue},
		{"negative share", head + "pending j project a share -0.5\n", 3, "share", ErrBadValue},
		{"share of a whole GPU", head + "pending j project a share 1.5\n", 3, "share", ErrOverCapacity},
		{"more GPUs than any node", head + "pending j project a gpus 9\n", 3, "gpus", ErrOverCapacity},
		{"over-committed GPU", head + "run j project a share 0.6 node n1 gpu 0\nrun k project a share 0.6 node n1 gpu 0\n", 4, "gpu", nil},
		{"three decimals", head + "project b guaranteed 0.125\n", 3, "guaranteed", ErrBadValue},
		{"unknown keyword", head + "nodes n2\n", 3, "", ErrUnknown},
		{"unknown expectation", head + "expect miracles\n", 3, "expect", ErrUnknown},
		{"bad rounds", "rounds many\n", 1, "rounds", ErrBadValue},
		{"value missing", "node n1 gpus\n", 1, "gpus", ErrMissing},
		{"GPU indexes in gpus on a run line", head + "run j project a gpus 0,1 node n1 gpu 0,1\n", 3, "gpus", ErrBadValue},
		{"GPU indexes in gpus on a node line", "node n1 gpus 0,1\n", 1, "gpus", ErrBadValue},
		{"GPU indexes in gpus on an expected placement", head + "expect place j node n1 gpus 0,1\n", 3, "gpus", ErrBadValue},
		{"a count in gpus on an expected placement", head + "expect place j node n1 gpus 1\n", 3, "gpus", ErrBadValue},
		{"a count in gpu on a run line", head + "run j project a gpu 2 node n1\n", 3, "gpu", ErrMissing},
		{"a count in gpu on a pending line", head + "pending j project a gpu 2\n", 3, "gpu", ErrMissing},
		{"a binding on a pending line", head + "pending j project a gpus 1 gpu 0\n", 3, "gpu", ErrBadValue},
		{"minimum of zero", head + "pending j project a gpus 1 count 2 min 0\n", 3, "min", ErrBadValue},
		{"shrunk without a minimum", head + "pending j project a gpus 1 shrunk\n", 3, "shrunk", ErrBadValue},
		{"shrunk and suspended", head + "pending j project a gpus 1 min 1 shrunk suspended\n", 3, "shrunk", ErrBadValue},
		{"gang on some allocations only", head + "run j project a gpus 1 node n1 gpu 0 gang\nrun j project a gpus 1 node n1 gpu 1\n", 4, "gang", ErrBadValue},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("test.scn", strings.NewReader(tt.text))
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v, want a ParseError", err)
			}
			if pe.File != "test.scn" || pe.Line != tt.line || pe.Field != tt.field {
				t.Errorf("error at %s:%d field %q, want line %d field %q (%v)", pe.File, pe.Line, pe.Field, tt.line, tt.field, err)
			}
			if tt.err != nil && !errors.Is(err, tt.err) {
				t.Errorf("error %v, want it to wrap %v", err, tt.err)
			}
			if !strings.HasPrefix(err.Error(), "test.scn:") {
				t.Errorf("message %q does not start with the file name", err)
			}
		})
	}
}

// FuzzParse feeds the parser mutations of the scenario corpus: it must
// never panic, and whatever it accepts must plan without error.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.scn"))
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(data))
	}
	f.Add("node n1 gpus 1\nproject a guaranteed 0.5 limit 0\npending j project a share 0.01 count 3\n")
	f.Fuzz(func(t *testing.T, text string) {
		sc, err := Parse("fuzz.scn", strings.NewReader(text))
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) && !strings.HasPrefix(err.Error(), "fuzz.scn") {
				t.Fatalf("error without file: %v", err)
			}
			return
		}
		if len(sc.Initial.Nodes) > 64 || len(sc.Initial.Allocations) > 256 || sc.Rounds > 10 {
			return // keep each input cheap
		}
		if _, err := sc.Run(plan.Options{}); err != nil {
			t.Fatalf("accepted scenario fails to plan: %v", err)
		}
	})
}

// TestParseGangAndElastic: the gang, min and shrunk fields reach the
// snapshot, and a job may be named like a flag ("gang").
func TestParseGangAndElastic(t *testing.T) {
	sc, err := Parse("t.scn", strings.NewReader(`node n1 gpus 4
project p guaranteed 1
run gang project p gpus 1 node n1 gpu 0 gang min 1
pending gang project p gpus 1 count 2 gang
pending e project p gpus 1 min 2 shrunk
`))
	if err != nil {
		t.Fatal(err)
	}
	a, w := sc.Initial.Allocations[0], sc.Initial.Pending
	if a.Job != "gang" || !a.Gang || a.MinCount != 1 {
		t.Errorf("run line: %+v", a)
	}
	if w[0].Job != "gang" || !w[0].Gang || w[0].Shrunk || w[0].Count != 2 {
		t.Errorf("gang pending line: %+v", w[0])
	}
	if w[1].Gang || !w[1].Shrunk || w[1].MinCount != 2 {
		t.Errorf("shrunk pending line: %+v", w[1])
	}
}

func TestParseFirstFitFlag(t *testing.T) {
	tests := []struct {
		line string
		want bool
	}{
		{"expect place j node n1 gpu 0 firstfit", true},
		{"expect place j node n1 gpu 0", false},
		{"expect suspend a b firstfit round 1", true},
	}
	for _, tt := range tests {
		sc, err := Parse("t.scn", strings.NewReader("node n1 gpus 1\nproject p guaranteed 1\n"+tt.line+"\n"))
		if err != nil {
			t.Fatalf("%q: %v", tt.line, err)
		}
		if got := sc.Expects[0].FirstFitOnly; got != tt.want {
			t.Errorf("%q: FirstFitOnly %v, want %v", tt.line, got, tt.want)
		}
		if slices.Contains(sc.Expects[0].Jobs, "firstfit") {
			t.Errorf("%q: flag taken as a job name", tt.line)
		}
	}
}
