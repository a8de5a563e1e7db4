// Package recordkey authenticates what the quota service writes where
// others may write too (docs/design.md, Suspension and resumption, "Who
// may steer the service"): its suspension records in Consul KV and the
// version tags it puts on the jobs it stops in Nomad.
//
// A Keyring holds the current key, which signs and seals, and the
// previous keys, which only verify and open (a rotation). Each key
// derives three sub-keys with HMAC-SHA256 over a label, so that a record
// MAC can never be replayed as a tag proof or used as an encryption key:
// records are signed with HMAC-SHA256, job specs in records are sealed
// with AES-256-GCM, and tags carry a short HMAC proof in their
// description.
package recordkey

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MinKeyBytes is the shortest key accepted.
const MinKeyBytes = 32

// key is one key with its derived sub-keys.
type key struct {
	id              string
	mac, seal, tags []byte
}

func derive(secret []byte, label string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	return m.Sum(nil)
}

func newKey(secret []byte) (key, error) {
	if len(secret) < MinKeyBytes {
		return key{}, fmt.Errorf("a record key must be at least %d bytes, this one has %d", MinKeyBytes, len(secret))
	}
	sum := sha256.Sum256(secret)
	return key{
		id:   hex.EncodeToString(sum[:4]),
		mac:  derive(secret, "gpushare record mac v1"),
		seal: derive(secret, "gpushare record spec v1"),
		tags: derive(secret, "gpushare version tag v1"),
	}, nil
}

// Keyring is the current key and the previous ones. It is immutable.
type Keyring struct {
	keys []key // keys[0] is current
}

// New returns a keyring whose first key signs and seals and whose others
// only verify and open.
func New(current []byte, previous ...[]byte) (*Keyring, error) {
	k := &Keyring{}
	for i, secret := range append([][]byte{current}, previous...) {
		kk, err := newKey(secret)
		if err != nil {
			if i == 0 {
				return nil, fmt.Errorf("current key: %w", err)
			}
			return nil, fmt.Errorf("previous key %d: %w", i, err)
		}
		k.keys = append(k.keys, kk)
	}
	return k, nil
}

// Generate returns a new random key of MinKeyBytes.
func Generate() ([]byte, error) {
	b := make([]byte, MinKeyBytes)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("generating a record key: %w", err)
	}
	return b, nil
}

// CurrentID names the current key (the first 8 hex digits of its SHA-256).
func (k *Keyring) CurrentID() string { return k.keys[0].id }

func (k *Keyring) byID(id string) (key, bool) {
	for _, kk := range k.keys {
		if kk.id == id {
			return kk, true
		}
	}
	return key{}, false
}

// macPrefix starts every signature; the key ID and the MAC follow.
const macPrefix = "v1:"

// Sign returns the signature of msg with the current key:
// "v1:<key id>:<base64 HMAC-SHA256>".
func (k *Keyring) Sign(msg []byte) string {
	cur := k.keys[0]
	return macPrefix + cur.id + ":" + base64.RawStdEncoding.EncodeToString(mac(cur.mac, msg))
}

func mac(sub, msg []byte) []byte {
	m := hmac.New(sha256.New, sub)
	m.Write(msg)
	return m.Sum(nil)
}

// Why a signature does not verify.
var (
	ErrUnsigned   = errors.New("it carries no signature (written by hand, or by a version of the service that did not sign records)")
	ErrUnknownKey = errors.New("it is signed with a key the service does not hold (the key was lost or rotated away)")
	ErrBadMAC     = errors.New("its signature does not match its content (the record was changed or forged)")
)

// Verify checks sig over msg. It returns the ID of the key that signed
// and whether that is the current key; an error wraps ErrUnsigned,
// ErrUnknownKey or ErrBadMAC.
func (k *Keyring) Verify(msg []byte, sig string) (id string, current bool, err error) {
	if sig == "" {
		return "", false, ErrUnsigned
	}
	rest, ok := strings.CutPrefix(sig, macPrefix)
	id, b64, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 {
		return "", false, fmt.Errorf("%w: malformed signature", ErrBadMAC)
	}
	kk, found := k.byID(id)
	if !found {
		return id, false, fmt.Errorf("%w: key %q", ErrUnknownKey, id)
	}
	got, err := base64.RawStdEncoding.Strict().DecodeString(b64)
	if err != nil || !hmac.Equal(got, mac(kk.mac, msg)) {
		return id, false, ErrBadMAC
	}
	return id, kk.id == k.keys[0].id, nil
}

// Seal encrypts plain with the current key, bound to context (the
// record's key: a sealed spec moved to another record does not open).
// The result is "<key id>:<base64 nonce||ciphertext>".
func (k *Keyring) Seal(plain, context []byte) (string, error) {
	cur := k.keys[0]
	aead, err := gcm(cur.seal)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("sealing: %w", err)
	}
	out := aead.Seal(nonce, nonce, plain, context)
	return cur.id + ":" + base64.StdEncoding.EncodeToString(out), nil
}

// Open decrypts what Seal returned with the same context.
func (k *Keyring) Open(sealed string, context []byte) ([]byte, error) {
	id, b64, ok := strings.Cut(sealed, ":")
	if !ok {
		return nil, errors.New("sealed data is malformed")
	}
	kk, found := k.byID(id)
	if !found {
		return nil, fmt.Errorf("%w: key %q", ErrUnknownKey, id)
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("sealed data is not base64: %w", err)
	}
	aead, err := gcm(kk.seal)
	if err != nil {
		return nil, err
	}
	if len(raw) < aead.NonceSize() {
		return nil, errors.New("sealed data is truncated")
	}
	plain, err := aead.Open(nil, raw[:aead.NonceSize()], raw[aead.NonceSize():], context)
	if err != nil {
		return nil, fmt.Errorf("sealed data does not open: %w", err)
	}
	return plain, nil
}

func gcm(sub []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(sub)
	if err != nil {
		return nil, fmt.Errorf("sealing key: %w", err)
	}
	return cipher.NewGCM(block)
}

// tagProofMarker starts the proof at the end of a tag's description.
const tagProofMarker = " [gpushare-proof "

// tagMessage is what a tag proof covers: the job, the version it tags and
// the tag's name. A tag Nomad copies to a later version (a stop or a
// `nomad job start` of a tagged version) does not prove that version.
func tagMessage(namespace, job string, version uint64, name string) []byte {
	return []byte(strings.Join([]string{"tag", namespace, job, strconv.FormatUint(version, 10), name}, "\x00"))
}

// ProveTag returns description with a proof that the service tagged
// version of namespace/job with name, within Nomad's 1,000 characters.
func (k *Keyring) ProveTag(description, namespace, job string, version uint64, name string) string {
	cur := k.keys[0]
	proof := tagProofMarker + cur.id + ":" + hex.EncodeToString(mac(cur.tags, tagMessage(namespace, job, version, name))[:16]) + "]"
	if max := 1000 - len(proof); len(description) > max {
		description = description[:max-3] + "..."
	}
	return description + proof
}

// TagProven says description carries a proof, by a key of the ring, that
// the service tagged version of namespace/job with name.
func (k *Keyring) TagProven(description, namespace, job string, version uint64, name string) bool {
	i := strings.LastIndex(description, tagProofMarker)
	if i < 0 || !strings.HasSuffix(description, "]") {
		return false
	}
	id, hexMAC, ok := strings.Cut(description[i+len(tagProofMarker):len(description)-1], ":")
	if !ok {
		return false
	}
	kk, found := k.byID(id)
	if !found {
		return false
	}
	got, err := hex.DecodeString(hexMAC)
	if err != nil || len(got) != 16 {
		return false
	}
	return hmac.Equal(got, mac(kk.tags, tagMessage(namespace, job, version, name))[:16])
}
