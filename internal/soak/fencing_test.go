package soak

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestJobWriteNamesJobChanges(t *testing.T) {
	cases := []struct {
		method, path, want string
	}{
		{http.MethodPut, "/v1/jobs", "register"},
		{http.MethodPost, "/v1/job/train", "register"},
		{http.MethodDelete, "/v1/job/train", "stop"},
		{http.MethodPost, "/v1/job/train/scale", "scale"},
		{http.MethodPut, "/v1/job/train/versions/for-b/tag", "tag"},
		{http.MethodPut, "/v1/job/train/evaluate", "write evaluate"},
		{http.MethodGet, "/v1/job/train", ""},
		{http.MethodGet, "/v1/jobs", ""},
		{http.MethodPost, "/v1/jobs/parse", ""},
		{http.MethodPost, "/v1/jobs/statuses", ""},
		{http.MethodPut, "/v1/job/train/plan", ""},
		{http.MethodPut, "/v1/var/gpushare/key", ""},
		{http.MethodPut, "/v1/jobsx", ""},
	}
	for _, tc := range cases {
		if got := jobWrite(tc.method, tc.path); got != tc.want {
			t.Errorf("jobWrite(%s %s) = %q, want %q", tc.method, tc.path, got, tc.want)
		}
	}
}

func TestJudgeWritesAgainstLockTenures(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// read returns a read of the lock from ms to ms+10.
	read := func(ms int, holder, session string, modify uint64) lockObs {
		return lockObs{start: at(ms), end: at(ms + 10), holder: holder, session: session, createIndex: modify, modifyIndex: modify, lockIndex: 1}
	}
	// a holds the lock (read at 0, 1000, 2000), loses it (absent at
	// 3000), b holds it (reads at 4000, 5000, 6000).
	obs := []lockObs{read(0, "a", "s1", 5), read(1000, "a", "s1", 5), read(2000, "a", "s1", 5),
		read(3000, "", "", 0), read(4000, "b", "s2", 9), read(5000, "b", "s2", 9), read(6000, "b", "s2", 9)}
	ts := tenures(obs)
	if len(ts) != 2 || ts[0].holder != "a" || !ts[0].from.Equal(at(10)) || !ts[0].to.Equal(at(2000)) || ts[1].holder != "b" {
		t.Fatalf("tenures = %+v", ts)
	}
	cases := []struct {
		name       string
		by         string
		start, end int
		want       verdict
	}{
		{"leader acting in its tenure", "a", 500, 900, inTenure},
		{"new leader acting in its tenure", "b", 4500, 5500, inTenure},
		{"old leader acting in the new one's tenure", "a", 4500, 4600, stale},
		{"answered after the last read", "b", 5500, 6500, unjudged},
		{"across the change of leader", "a", 1500, 3500, unjudged},
		{"sent before the tenure's first read ended", "b", 4005, 4500, unjudged},
	}
	for _, tc := range cases {
		got, _ := judge(write{by: tc.by, what: "stop x", start: at(tc.start), end: at(tc.end)}, ts)
		if got != tc.want {
			t.Errorf("%s: verdict %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestTenuresNeedAnUnchangedKey(t *testing.T) {
	t0 := time.Unix(1000, 0)
	o := func(s int, session string, create, modify, lock uint64) lockObs {
		return lockObs{start: t0.Add(time.Duration(s) * time.Second), end: t0.Add(time.Duration(s)*time.Second + time.Millisecond),
			holder: "a", session: session, createIndex: create, modifyIndex: modify, lockIndex: lock}
	}
	cases := []struct {
		name string
		obs  []lockObs
		want int
	}{
		{"one read proves no span", []lockObs{o(0, "s1", 1, 1, 1)}, 0},
		{"same key state", []lockObs{o(0, "s1", 1, 1, 1), o(1, "s1", 1, 1, 1)}, 1},
		{"re-created key", []lockObs{o(0, "s1", 1, 1, 1), o(1, "s1", 2, 2, 1)}, 0},
		{"released and re-acquired", []lockObs{o(0, "s1", 1, 1, 1), o(1, "s1", 1, 3, 2)}, 0},
		{"another session", []lockObs{o(0, "s1", 1, 1, 1), o(1, "s2", 1, 1, 1)}, 0},
		{"not held", []lockObs{o(0, "", 1, 1, 1), o(1, "", 1, 1, 1)}, 0},
	}
	for _, tc := range cases {
		if got := len(tenures(tc.obs)); got != tc.want {
			t.Errorf("%s: %d tenures, want %d", tc.name, got, tc.want)
		}
	}
}

func TestJobOfRequest(t *testing.T) {
	cases := []struct {
		method, target, body, want string
	}{
		{http.MethodDelete, "/v1/job/j003?namespace=team-b&purge=false", "", "team-b/j003"},
		{http.MethodPut, "/v1/job/j003/versions/x/tag?namespace=team-b", "", "team-b/j003"},
		{http.MethodPut, "/v1/jobs?namespace=team-b", `{"Job":{"ID":"j010","Namespace":"team-c"}}`, "team-c/j010"},
		{http.MethodPut, "/v1/jobs", `not json`, "default/?"},
	}
	for _, tc := range cases {
		r := httptest.NewRequest(tc.method, tc.target, strings.NewReader(tc.body))
		if got := jobOfRequest(r); got != tc.want {
			t.Errorf("jobOfRequest(%s %s) = %q, want %q", tc.method, tc.target, got, tc.want)
		}
		if b, _ := io.ReadAll(r.Body); string(b) != tc.body {
			t.Errorf("%s %s: the body left for the proxy is %q, want %q", tc.method, tc.target, b, tc.body)
		}
	}
}

func TestCheckerReportsStaleWriteWithHistory(t *testing.T) {
	var out strings.Builder
	c := &checker{hist: newHistory(100, &out)}
	t0 := time.Now().Add(-time.Minute)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, ms := range []int{0, 1000, 2000} {
		c.noteLock(lockObs{start: at(ms), end: at(ms + 10), holder: "soak-b", session: "s2", createIndex: 7, modifyIndex: 7, lockIndex: 1})
	}
	c.noteWrite(write{by: "soak-a", what: "stop team-a/j1", start: at(500), end: at(600)})
	c.noteWrite(write{by: "soak-b", what: "register team-a/j2", start: at(700), end: at(800)})
	c.noteWrite(write{by: "soak-b", what: "register team-a/j3", start: at(2500), end: at(2600)}) // no read after it yet
	c.judgeWrites()
	if len(c.violations) != 1 || !strings.Contains(c.violations[0], "stale action: stop team-a/j1 by soak-a") ||
		!strings.Contains(c.violations[0], "while soak-b held the leader lock") {
		t.Fatalf("violations = %q", c.violations)
	}
	if !strings.Contains(out.String(), "history around the violation") || !strings.Contains(out.String(), "service write: stop team-a/j1") {
		t.Errorf("no history around the violation:\n%s", out.String())
	}
	if f := c.fencing; f.writes != 3 || f.inTenure != 1 || f.unjudged != 0 || len(f.pending) != 1 {
		t.Errorf("fencing counts = %+v, want 3 writes, 1 in tenure, 1 pending", f)
	}
}
