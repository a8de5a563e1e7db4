package vocab

import (
	"strings"
	"testing"
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
		if err == nil && (n < 1 || n > UnitsPerGPU) {
			t.Errorf("ParseLimit(%q) = %d", s, n)
		}
	})
}
