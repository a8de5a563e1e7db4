package quota

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/kvlayout"
	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
)

var agents *localcluster.Cluster

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	c, err := localcluster.New(localcluster.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting test cluster:", err)
		os.Exit(1)
	}
	agents = c
	code := m.Run()
	if err := c.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping test cluster:", err)
	}
	os.Exit(code)
}

func needCluster(t *testing.T) *localcluster.Cluster {
	t.Helper()
	if agents == nil {
		t.Skip("integration test: needs real agents; run without -short")
	}
	return agents
}

// TestWatcherAppliesChangesAndKeepsLastGood writes quota documents to a real
// Consul and checks that valid changes apply (logging how long each took),
// that a broken document is reported beside the quotas folder naming the
// field, and that the last good settings stay in force until the document
// is fixed.
func TestWatcherAppliesChangesAndKeepsLastGood(t *testing.T) {
	c := needCluster(t)
	layout := kvlayout.New("watcher-test")
	w := NewWatcher(c.Consul, layout, hclog.NewNullLogger())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	kv := c.Consul.KV()
	put := func(project, doc string) {
		t.Helper()
		if _, err := kv.Put(&consulapi.KVPair{Key: layout.Quota(project), Value: []byte(doc)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	guarantee := func(project string) (string, bool) {
		for _, s := range w.Settings() {
			if s.Project == project {
				return s.Guaranteed.String(), true
			}
		}
		return "", false
	}
	applied := func(what string, cond func() error) {
		t.Helper()
		start := time.Now()
		testcluster.Eventually(t, 30*time.Second, cond)
		t.Logf("%s applied after %s", what, time.Since(start).Round(time.Millisecond))
	}

	put("ml", `{"guaranteed": 2}`)
	applied("new document", func() error {
		if g, ok := guarantee("ml"); !ok || g != "2.00" {
			return fmt.Errorf("ml guarantee %q (present %v), want 2.00", g, ok)
		}
		return nil
	})
	put("ml", `{"guaranteed": 1.5, "priority": 3}`)
	applied("changed document", func() error {
		if g, _ := guarantee("ml"); g != "1.50" {
			return fmt.Errorf("ml guarantee %q, want 1.50", g)
		}
		return nil
	})

	put("ml", `{"guaranteed": 3, "limit": 1}`)
	var rep ErrorReport
	applied("error report", func() error {
		pair, _, err := kv.Get(layout.QuotaError("ml"), nil)
		if err != nil || pair == nil {
			return fmt.Errorf("no error report at %s yet (%v)", layout.QuotaError("ml"), err)
		}
		return json.Unmarshal(pair.Value, &rep)
	})
	if rep.Field != "limit" || rep.Fix == "" || rep.InForce == nil || rep.InForce.Guaranteed != 150 {
		t.Fatalf("error report %+v: want field limit, a fix, and the last good settings (1.50) in force", rep)
	}
	if g, _ := guarantee("ml"); g != "1.50" {
		t.Fatalf("after a broken document, ml guarantee %q, want the last good 1.50", g)
	}
	if _, ok := w.Rejected()["ml"]; !ok {
		t.Fatal("Rejected does not list ml")
	}

	put("ml", `{"guaranteed": 4}`)
	applied("fixed document", func() error {
		if g, _ := guarantee("ml"); g != "4.00" {
			return fmt.Errorf("ml guarantee %q, want 4.00", g)
		}
		if pair, _, err := kv.Get(layout.QuotaError("ml"), nil); err != nil || pair != nil {
			return fmt.Errorf("error report still present (%v)", err)
		}
		return nil
	})

	put("never-good", `{"guaranteed": "x"}`)
	applied("report for a project never valid", func() error {
		pair, _, err := kv.Get(layout.QuotaError("never-good"), nil)
		if err != nil || pair == nil {
			return fmt.Errorf("no report yet (%v)", err)
		}
		if _, ok := guarantee("never-good"); ok {
			t.Fatal("an invalid document was put in force")
		}
		return nil
	})

	if _, err := kv.Delete(layout.Quota("ml"), nil); err != nil {
		t.Fatal(err)
	}
	applied("deleted document", func() error {
		if _, ok := guarantee("ml"); ok {
			return fmt.Errorf("ml still in force after its document was deleted")
		}
		return nil
	})
}

// TestWatcherDepartments writes a department and a project in it to a
// real Consul, project first as Terraform may: the project waits for its
// department, then both are in force; a department lowered below its
// project is reported under the departments' subfolder of the error
// reports and keeps its last good settings until it is fixed.
func TestWatcherDepartments(t *testing.T) {
	c := needCluster(t)
	layout := kvlayout.New("watcher-dept-test")
	w := NewWatcher(c.Consul, layout, hclog.NewNullLogger())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	kv := c.Consul.KV()
	put := func(key, doc string) {
		t.Helper()
		if _, err := kv.Put(&consulapi.KVPair{Key: key, Value: []byte(doc)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	report := func(key string) (ErrorReport, error) {
		var rep ErrorReport
		pair, _, err := kv.Get(key, nil)
		if err != nil || pair == nil {
			return rep, fmt.Errorf("no report at %s (%v)", key, err)
		}
		return rep, json.Unmarshal(pair.Value, &rep)
	}
	inForce := func() string {
		var parts []string
		for _, d := range w.Departments() {
			parts = append(parts, "department "+d.Name+" "+d.Guaranteed.String())
		}
		for _, s := range w.Settings() {
			parts = append(parts, "project "+s.Project+" "+s.Guaranteed.String()+"@"+s.Department)
		}
		return fmt.Sprint(parts)
	}

	put(layout.Quota("ml"), `{"guaranteed": 2, "department": "research"}`)
	testcluster.Eventually(t, 30*time.Second, func() error {
		rep, err := report(layout.QuotaError("ml"))
		if err != nil {
			return err
		}
		if rep.Field != "department" || rep.InForce != nil {
			t.Fatalf("report %+v: want field department and nothing in force", rep)
		}
		return nil
	})
	put(layout.Department("research"), `{"guaranteed": 3}`)
	testcluster.Eventually(t, 30*time.Second, func() error {
		if got, want := inForce(), "[department research 3.00 project ml 2.00@research]"; got != want {
			return fmt.Errorf("in force %s, want %s", got, want)
		}
		if _, err := report(layout.QuotaError("ml")); err == nil {
			return fmt.Errorf("the project's report is still there")
		}
		return nil
	})

	put(layout.Department("research"), `{"guaranteed": 1}`)
	testcluster.Eventually(t, 30*time.Second, func() error {
		rep, err := report(layout.DepartmentError("research"))
		if err != nil {
			return err
		}
		if rep.DepartmentInForce == nil || rep.DepartmentInForce.Guaranteed != 300 || rep.Key != layout.Department("research") {
			t.Fatalf("report %+v: want the department's key and its last good 3.00 in force", rep)
		}
		return nil
	})
	if got, want := inForce(), "[department research 3.00 project ml 2.00@research]"; got != want {
		t.Fatalf("in force %s after a department lowered below its project, want the last good %s", got, want)
	}
	put(layout.Quota("ml"), `{"guaranteed": 1, "department": "research"}`)
	testcluster.Eventually(t, 30*time.Second, func() error {
		if got, want := inForce(), "[department research 1.00 project ml 1.00@research]"; got != want {
			return fmt.Errorf("in force %s, want %s", got, want)
		}
		if _, err := report(layout.DepartmentError("research")); err == nil {
			return fmt.Errorf("the department's report is still there")
		}
		return nil
	})
}

// TestWatcherWithATokenFromBeforeDepartments: the service's Consul token
// from before departments (read on quotas/ only) still reads the quotas
// and plans: a project naming a department it cannot read is rejected,
// the others are in force, and the log says what the token lacks.
func TestWatcherWithATokenFromBeforeDepartments(t *testing.T) {
	needCluster(t)
	c := testcluster.Start(t, localcluster.Options{ConsulOnly: true, ACL: true})
	layout := kvlayout.New("gpushare")
	token, err := c.CreateConsulToken("quota-before-departments",
		`key_prefix "gpushare/quotas/" { policy = "read" }
key_prefix "gpushare/status/" { policy = "write" }`)
	if err != nil {
		t.Fatal(err)
	}
	client, err := consulapi.NewClient(&consulapi.Config{Address: strings.TrimPrefix(c.ConsulAddr, "http://"), Token: token})
	if err != nil {
		t.Fatal(err)
	}
	for key, doc := range map[string]string{layout.Department("research"): `{"guaranteed": 2}`,
		layout.Quota("ml"): `{"guaranteed": 1, "department": "research"}`, layout.Quota("ops"): `{"guaranteed": 1}`} {
		if _, err := c.Consul.KV().Put(&consulapi.KVPair{Key: key, Value: []byte(doc)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	var logs strings.Builder
	var mu sync.Mutex
	w := NewWatcher(client, layout, hclog.New(&hclog.LoggerOptions{Output: lockedWriter{&mu, &logs}}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	testcluster.Eventually(t, 30*time.Second, func() error {
		if w.LastSync().IsZero() {
			return fmt.Errorf("the quotas are not read yet")
		}
		set := w.InForce()
		if len(set.Projects) != 1 || set.Projects[0].Project != "ops" || len(set.Departments) != 0 {
			return fmt.Errorf("in force %+v, want ops alone", set)
		}
		if fe := w.Rejected()["ml"]; fe == nil || fe.Field != "department" {
			return fmt.Errorf("ml's rejection %v, want one on its department", fe)
		}
		mu.Lock()
		defer mu.Unlock()
		if !strings.Contains(logs.String(), "may not read some documents") || !strings.Contains(logs.String(), "gpushare/departments/") {
			return fmt.Errorf("no warning about the departments the token cannot read:\n%s", logs.String())
		}
		return nil
	})
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
