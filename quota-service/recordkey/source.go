package recordkey

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
)

// Source loads the keyring. Load is called every cycle; a source re-reads
// its store at most every refresh period, so that a rotation is seen
// within it.
type Source interface {
	Load(ctx context.Context) (*Keyring, error)
	// Describe names where the keys live, for messages.
	Describe() string
}

// Parse reads keys as written in a key file or a variable item: base64
// (standard or URL alphabet, padded or not), one per line or separated by
// spaces; lines starting with '#' are comments. The first key is the
// current one.
func Parse(text string) ([][]byte, error) {
	var keys [][]byte
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		for _, field := range strings.Fields(line) {
			k, err := decodeKey(field)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n+1, err)
			}
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("no key found: write a base64 key of at least 32 bytes (for example `openssl rand -base64 32`)")
	}
	return keys, nil
}

func decodeKey(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if k, err := enc.DecodeString(s); err == nil {
			if len(k) < MinKeyBytes {
				return nil, fmt.Errorf("a key of %d bytes is too short: use at least %d (for example `openssl rand -base64 32`)", len(k), MinKeyBytes)
			}
			return k, nil
		}
	}
	return nil, errors.New("a key is not base64: write one made with `openssl rand -base64 32`")
}

// Encode is a key as Parse reads it.
func Encode(key []byte) string { return base64.StdEncoding.EncodeToString(key) }

// cached keeps the last keyring loaded and when.
type cached struct {
	refresh time.Duration
	mu      sync.Mutex
	ring    *Keyring
	at      time.Time
}

// get returns the cached ring while fresh, else load's; a failed load
// keeps no stale ring: the service does not sign or verify with keys it
// cannot confirm.
func (c *cached) get(load func() (*Keyring, error)) (*Keyring, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	refresh := c.refresh
	if refresh <= 0 {
		refresh = 30 * time.Second
	}
	if c.ring != nil && time.Since(c.at) < refresh {
		return c.ring, nil
	}
	ring, err := load()
	if err != nil {
		c.ring = nil
		return nil, err
	}
	c.ring, c.at = ring, time.Now()
	return ring, nil
}

// File is a key file: the current key first, then previous keys (Parse).
// It should be readable by the service alone (a Nomad template from a
// Variable into secrets/, or a file of mode 0400).
type File struct {
	Path string
	// Refresh is how often the file is read again (default 30 s).
	Refresh time.Duration
	cache   cached
}

// Describe names the file.
func (f *File) Describe() string { return "key file " + f.Path }

// Load reads the file.
func (f *File) Load(context.Context) (*Keyring, error) {
	f.cache.refresh = f.Refresh
	return f.cache.get(func() (*Keyring, error) {
		data, err := os.ReadFile(f.Path)
		if err != nil {
			return nil, fmt.Errorf("reading the record key file (-record-key-file): %w", err)
		}
		keys, err := Parse(string(data))
		if err != nil {
			return nil, fmt.Errorf("record key file %s: %w", f.Path, err)
		}
		return New(keys[0], keys[1:]...)
	})
}

// Variable items.
const (
	// ItemKey is the current key, base64.
	ItemKey = "key"
	// ItemPrevious are previous keys, base64, separated by spaces.
	ItemPrevious = "previous"
)

// Variable keeps the keys in a Nomad Variable (items ItemKey and
// ItemPrevious). When the variable does not exist, Load creates it with a
// new random key, with check-and-set so that two instances starting
// together agree on one key.
type Variable struct {
	Client    *nomadapi.Client
	Namespace string
	Path      string
	// Refresh is how often the variable is read again (default 30 s).
	Refresh time.Duration
	cache   cached
}

// Describe names the variable.
func (v *Variable) Describe() string {
	return fmt.Sprintf("Nomad Variable %s in namespace %s", v.Path, v.Namespace)
}

// Load reads the variable, creating it when absent.
func (v *Variable) Load(ctx context.Context) (*Keyring, error) {
	v.cache.refresh = v.Refresh
	return v.cache.get(func() (*Keyring, error) { return v.load(ctx) })
}

func (v *Variable) load(ctx context.Context) (*Keyring, error) {
	q := (&nomadapi.QueryOptions{Namespace: v.Namespace}).WithContext(ctx)
	vr, _, err := v.Client.Variables().Peek(v.Path, q)
	if err != nil {
		return nil, fmt.Errorf("reading the record keys from %s: %w (the service's Nomad token needs read and write on this variable: jobspecs/acl/nomad-gpushare-quota.policy.hcl)", v.Describe(), err)
	}
	if vr == nil {
		if vr, err = v.create(ctx); err != nil {
			return nil, err
		}
	}
	text := vr.Items[ItemKey]
	if text == "" {
		return nil, fmt.Errorf("%s has no item %q: put a base64 key of at least 32 bytes there (`nomad var put -namespace %s %s key=$(openssl rand -base64 32)`), or delete the variable and the service makes one",
			v.Describe(), ItemKey, v.Namespace, v.Path)
	}
	keys, err := Parse(text + "\n" + vr.Items[ItemPrevious])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", v.Describe(), err)
	}
	return New(keys[0], keys[1:]...)
}

// create writes a new key unless another instance did first.
func (v *Variable) create(ctx context.Context) (*nomadapi.Variable, error) {
	secret, err := Generate()
	if err != nil {
		return nil, err
	}
	nv := &nomadapi.Variable{Namespace: v.Namespace, Path: v.Path, Items: nomadapi.VariableItems{ItemKey: Encode(secret)}}
	created, _, err := v.Client.Variables().CheckedCreate(nv, (&nomadapi.WriteOptions{Namespace: v.Namespace}).WithContext(ctx))
	var conflict nomadapi.ErrCASConflict
	switch {
	case errors.As(err, &conflict):
		got, _, err := v.Client.Variables().Read(v.Path, (&nomadapi.QueryOptions{Namespace: v.Namespace}).WithContext(ctx))
		if err != nil {
			return nil, fmt.Errorf("reading %s after another instance created it: %w", v.Describe(), err)
		}
		return got, nil
	case err != nil:
		return nil, fmt.Errorf("creating %s with a new record key: %w (the service's Nomad token needs read and write on this variable)", v.Describe(), err)
	}
	return created, nil
}

// Static is a fixed keyring (tests, and callers that load keys
// themselves).
type Static struct{ Ring *Keyring }

// Describe says the keys are fixed.
func (s Static) Describe() string { return "fixed keys" }

// Load returns the ring.
func (s Static) Load(context.Context) (*Keyring, error) { return s.Ring, nil }
