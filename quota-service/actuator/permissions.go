package actuator

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/hashicorp/nomad/acl"
	nomadapi "github.com/hashicorp/nomad/api"
)

// The service never stops what it cannot bring back (docs/design.md,
// Suspension and resumption). Before a job may be a victim, the service
// checks that its record fits Consul's value limit and that its Nomad
// token may register the job again: Nomad's register endpoint checks the
// namespace (submit-job or register-job), host volumes (mount-readwrite,
// or mount-readonly for read-only ones), CSI volumes (csi-mount-volume and
// plugin read) and CSI plugin tasks (csi-register-plugin); its plan
// endpoint checks none of the volume rights, so a dry run proves nothing.
// The service evaluates the token's own policies with Nomad's ACL code
// (package github.com/hashicorp/nomad/acl) instead.

// permissions reads the service's Nomad token's policies, at most every
// PermissionsEvery.
type permissions struct {
	nomad *nomadapi.Client
	every time.Duration

	mu   sync.Mutex
	read time.Time
	// acl is nil when everything is allowed (ACLs disabled, or a
	// management token).
	acl *acl.ACL
	// gen counts the reads that found other policies than the last
	// (policies: their names and rules), to key cached verdicts: a read
	// that finds the same keeps every verdict.
	gen      int
	policies string
}

func newPermissions(client *nomadapi.Client, every time.Duration) *permissions {
	return &permissions{nomad: client, every: every}
}

// current returns the token's ACL and its generation, reading it again
// when older than every. A failed read is not cached.
func (p *permissions) current(ctx context.Context, now time.Time) (*acl.ACL, int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gen > 0 && now.Sub(p.read) < p.every {
		return p.acl, p.gen, nil
	}
	a, policies, err := p.load(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("reading the service's Nomad token's policies (needed to know it may resume what it suspends): %w", err)
	}
	if p.gen == 0 || policies != p.policies {
		p.gen++
	}
	p.acl, p.read, p.policies = a, now, policies
	return p.acl, p.gen, nil
}

// load builds the token's ACL from its policies and its roles' policies,
// and says what it was built from: the policies' names and rules, or that
// everything is allowed.
func (p *permissions) load(ctx context.Context) (*acl.ACL, string, error) {
	q := (&nomadapi.QueryOptions{}).WithContext(ctx)
	tok, _, err := p.nomad.ACLTokens().Self(q)
	if nomadwatch.StatusCode(err) == http.StatusBadRequest {
		return nil, "everything allowed", nil // ACL support disabled
	}
	if err != nil {
		return nil, "", err
	}
	if tok.Type == "management" || tok.AccessorID == "acls-disabled" {
		return nil, "everything allowed", nil // Nomad answers with this pseudo-token when ACLs are off
	}
	names := slices.Clone(tok.Policies)
	for _, link := range tok.Roles {
		role, _, err := p.nomad.ACLRoles().Get(link.ID, q)
		if err != nil {
			return nil, "", fmt.Errorf("reading ACL role %s: %w", link.Name, err)
		}
		for _, pl := range role.Policies {
			names = append(names, pl.Name)
		}
	}
	slices.Sort(names)
	var policies []*acl.Policy
	var read strings.Builder
	read.WriteString("policies\n")
	for _, name := range slices.Compact(names) {
		pol, _, err := p.nomad.ACLPolicies().Info(name, q)
		if err != nil {
			return nil, "", fmt.Errorf("reading ACL policy %s: %w", name, err)
		}
		parsed, err := acl.Parse(pol.Rules, acl.PolicyParseLenient)
		if err != nil {
			return nil, "", fmt.Errorf("parsing ACL policy %s: %w", name, err)
		}
		policies = append(policies, parsed)
		fmt.Fprintf(&read, "%q %q\n", name, pol.Rules)
	}
	a, err := acl.NewACL(false, policies)
	if err != nil {
		return nil, "", fmt.Errorf("building the token's ACL: %w", err)
	}
	return a, read.String(), nil
}

// MayRegister says why a token with ACL a (nil: everything allowed) may
// not register job, as Nomad's register endpoint decides it; "" when it
// may.
func MayRegister(a *acl.ACL, job *nomadapi.Job) string {
	if a == nil {
		return ""
	}
	ns := "default"
	if job.Namespace != nil {
		ns = *job.Namespace
	}
	if !a.AllowNsOpAnyOf(ns, acl.NamespaceCapabilitySubmitJob, acl.NamespaceCapabilityRegisterJob) {
		return fmt.Sprintf("the service's Nomad token may not submit jobs in namespace %s, so it could not resume it", ns)
	}
	for _, tg := range job.TaskGroups {
		if why := mayMountVolumes(a, ns, tg); why != "" {
			return why + ", so it could not resume it"
		}
		for _, t := range tg.Tasks {
			if t.CSIPluginConfig != nil && !a.AllowNsOp(ns, acl.NamespaceCapabilityCSIRegisterPlugin) {
				return fmt.Sprintf("task %s is a CSI plugin and the service's token lacks csi-register-plugin in namespace %s, so it could not resume it", t.Name, ns)
			}
		}
	}
	return ""
}

// mayMountVolumes checks one group's volumes as Nomad's register does.
func mayMountVolumes(a *acl.ACL, ns string, tg *nomadapi.TaskGroup) string {
	for name, vol := range tg.Volumes {
		if vol == nil {
			continue
		}
		switch vol.Type {
		case "csi":
			if !a.AllowPluginRead() || !a.AllowNsOp(ns, acl.NamespaceCapabilityCSIMountVolume) {
				return fmt.Sprintf("volume %q is a CSI volume and the service's token lacks csi-mount-volume in namespace %s (or plugin read)", name, ns)
			}
		case "host", "":
			ro := a.AllowHostVolumeOperation(vol.Source, acl.HostVolumeCapabilityMountReadOnly)
			rw := a.AllowHostVolumeOperation(vol.Source, acl.HostVolumeCapabilityMountReadWrite)
			if !rw && !(vol.ReadOnly && ro) {
				return fmt.Sprintf("volume %q mounts host volume %q and the service's token may not mount it %s", name, vol.Source, accessOf(vol.ReadOnly))
			}
		default:
			return fmt.Sprintf("volume %q has type %q, which Nomad lets no token register", name, vol.Type)
		}
	}
	for _, t := range tg.Tasks {
		for _, vm := range t.VolumeMounts {
			if vm == nil || vm.Volume == nil || vm.PropagationMode == nil || *vm.PropagationMode != "bidirectional" {
				continue
			}
			if vol := tg.Volumes[*vm.Volume]; vol != nil && !a.AllowHostVolumeOperation(vol.Source, acl.HostVolumeCapabilityMountReadWrite) {
				return fmt.Sprintf("task %s mounts %q bidirectionally and the service's token may not mount it read-write", t.Name, *vm.Volume)
			}
		}
	}
	return ""
}

func accessOf(readOnly bool) string {
	if readOnly {
		return "read-only"
	}
	return "read-write"
}

// recordMargin is room left in a record for what the plan adds (reason,
// allocation IDs) when its size is checked ahead of a suspension.
const recordMargin = 8 << 10

// mayComeBack says why job must not be suspended ("" when it may): its
// record would not fit in Consul, or the service's token could not
// register it again.
func (a *Actuator) mayComeBack(ctx context.Context, job *nomadapi.Job) string {
	probe := state.Suspension{Namespace: *job.Namespace, Job: *job.ID, Phase: state.PhaseStopping}
	size, err := state.RecordSize(probe, job)
	if err != nil {
		return err.Error()
	}
	if limit := a.store.RecordLimit(); size+recordMargin > limit {
		return fmt.Sprintf("its record (%d bytes with the job's spec, plus %d for the reason) would exceed the %d-byte limit on a Consul value, so nothing could bring it back", size, recordMargin, limit)
	}
	perms, _, err := a.perms.current(ctx, time.Now())
	if err != nil {
		return err.Error()
	}
	return MayRegister(perms, job)
}
