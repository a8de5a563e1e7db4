package cluster

import (
	"slices"
	"testing"
)

// TestCompareStopOrder: Nomad stops the highest instance index first;
// among equal indexes (an instance replaced, a canary), the newest, then
// the highest allocation ID.
func TestCompareStopOrder(t *testing.T) {
	for _, tc := range []struct {
		name    string
		members []GroupMember
		want    []string
	}{
		{"highest index first", []GroupMember{{"a", 0, 9}, {"b", 2, 1}, {"c", 1, 5}}, []string{"b", "c", "a"}},
		{"equal index: newest first", []GroupMember{{"a", 1, 5}, {"b", 1, 7}}, []string{"b", "a"}},
		{"equal index and start: highest ID first", []GroupMember{{"a", 1, 5}, {"c", 1, 5}, {"b", 1, 5}}, []string{"c", "b", "a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := slices.Clone(tc.members)
			slices.SortFunc(m, CompareStopOrder)
			var got []string
			for _, x := range m {
				got = append(got, x.ID)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("stop order %v, want %v", got, tc.want)
			}
		})
	}
}
