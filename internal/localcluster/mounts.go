package localcluster

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strings"
	"syscall"
)

// unmountUnder detaches every mount below dir (Nomad mounts a tmpfs for each
// task's secrets directory), deepest first, so the directory can be removed.
func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("reading mounts: %w", err)
	}
	defer f.Close()
	prefix := strings.TrimRight(dir, "/") + "/"
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		// Field 5 is the mount point, with spaces escaped as \040.
		point := strings.ReplaceAll(fields[4], `\040`, " ")
		if strings.HasPrefix(point, prefix) {
			points = append(points, point)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading mounts: %w", err)
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil {
			return fmt.Errorf("unmounting %s: %w", p, err)
		}
	}
	return nil
}
