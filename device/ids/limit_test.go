package ids

import (
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"
)

func TestParseLimit(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
	}{
		{"0.75", 75}, {"1", 100}, {"1.0", 100}, {"1.00", 100}, {"0.5", 50}, {" 0.05 ", 5}, {"0.01", 1},
	} {
		if got, err := ParseLimit(c.in); err != nil || got != c.want {
			t.Errorf("ParseLimit(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "0", "0.0", "1.01", "2", "0.755", "75%", ".5", "1.", "-0.5", "0,5", "1e-1", "abc", "0.5x", "0001.0"} {
		_, err := ParseLimit(in)
		if err == nil || !strings.Contains(err.Error(), LimitMetaKey) || !strings.Contains(err.Error(), `"0.75"`) {
			t.Errorf("ParseLimit(%q): %v, want an error naming the key and an example", in, err)
		}
	}
}

func FuzzParseLimit(f *testing.F) {
	for _, s := range []string{"0.75", "1.0", "1", "0.05", "2.5", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseLimit(s)
		if err == nil && (n < 1 || n > SharesPerGPU) {
			t.Errorf("ParseLimit(%q) = %d", s, n)
		}
	})
}

func TestTaskLimitNearestMetaWins(t *testing.T) {
	str := func(s string) *string { return &s }
	job := &api.Job{Meta: map[string]string{LimitMetaKey: "0.9"}, TaskGroups: []*api.TaskGroup{
		{Name: str("g"), Meta: map[string]string{LimitMetaKey: "0.8"}, Tasks: []*api.Task{
			{Name: "t", Meta: map[string]string{LimitMetaKey: "0.7"}}, {Name: "u"}}},
		{Name: str("h"), Tasks: []*api.Task{{Name: "t"}}},
	}}
	for _, c := range []struct{ group, task, want, where string }{
		{"g", "t", "0.7", "task"}, {"g", "u", "0.8", "group"}, {"h", "t", "0.9", "job"},
	} {
		if v, w, ok := TaskLimit(job, c.group, c.task); !ok || v != c.want || w != c.where {
			t.Errorf("%s/%s: %q from %s, %v", c.group, c.task, v, w, ok)
		}
	}
	if _, _, ok := TaskLimit(&api.Job{}, "g", "t"); ok {
		t.Error("a job without the key has a limit")
	}
}
