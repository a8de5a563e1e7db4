package vocab

import (
	"fmt"
	"strconv"
	"strings"
)

// LimitMetaKey is the meta key that gives a share task its limit: how much
// of the GPU, memory and compute, it may use while nobody else needs it,
// beside its request (the count of its nvidia/gpu-share device). Task meta
// wins over group meta, group meta over job meta. Without it the limit is
// the request. docs/design.md, "Dynamic fractions and the node-level
// scheduler".
const LimitMetaKey = "gpushare_limit"

// ParseLimit reads a limit value: a number of GPUs above 0 and at most 1
// with at most two decimals ("0.75", "1", "1.0"), returned in shares.
func ParseLimit(v string) (int, error) {
	s := strings.TrimSpace(v)
	whole, frac, hasDot := strings.Cut(s, ".")
	bad := fmt.Errorf(`%s = %q is not a fraction of a GPU: write a number above 0 and at most 1 with at most two decimals, such as "0.75" or "1.0" (the whole GPU)`, LimitMetaKey, v)
	if whole == "" || len(frac) > 2 || hasDot && frac == "" || !digits(whole) || !digits(frac) {
		return 0, bad
	}
	w, err := strconv.Atoi(whole)
	if err != nil {
		return 0, bad
	}
	f := 0
	if frac != "" {
		f, _ = strconv.Atoi(frac)
		if len(frac) == 1 {
			f *= 10
		}
	}
	shares := w*UnitsPerGPU + f
	if shares <= 0 || shares > UnitsPerGPU {
		return 0, bad
	}
	return shares, nil
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return len(s) <= 3
}
