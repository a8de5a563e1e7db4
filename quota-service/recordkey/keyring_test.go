package recordkey

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func secret(b byte) []byte { return bytes.Repeat([]byte{b}, MinKeyBytes) }

func ring(t *testing.T, cur []byte, prev ...[]byte) *Keyring {
	t.Helper()
	k, err := New(cur, prev...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestVerify(t *testing.T) {
	oldRing := ring(t, secret(1))
	rotated := ring(t, secret(2), secret(1))
	other := ring(t, secret(3))
	msg := []byte(`{"job":"train"}`)
	tests := []struct {
		name        string
		sig         string
		ring        *Keyring
		msg         []byte
		wantErr     error
		wantCurrent bool
	}{
		{"current key", oldRing.Sign(msg), oldRing, msg, nil, true},
		{"previous key after a rotation", oldRing.Sign(msg), rotated, msg, nil, false},
		{"signed with the new key", rotated.Sign(msg), rotated, msg, nil, true},
		{"lost key", oldRing.Sign(msg), other, msg, ErrUnknownKey, false},
		{"changed content", oldRing.Sign(msg), oldRing, []byte(`{"job":"pwned"}`), ErrBadMAC, false},
		{"unsigned", "", oldRing, msg, ErrUnsigned, false},
		{"garbage", "v1:zz", oldRing, msg, ErrBadMAC, false},
		{"MAC of another key under this key's ID", "v1:" + oldRing.CurrentID() + ":" + strings.SplitN(other.Sign(msg), ":", 3)[2], oldRing, msg, ErrBadMAC, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, current, err := tt.ring.Verify(tt.msg, tt.sig)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("Verify: %v, want %v", err, tt.wantErr)
			}
			if current != tt.wantCurrent {
				t.Fatalf("current = %v, want %v", current, tt.wantCurrent)
			}
		})
	}
}

func TestSealOpen(t *testing.T) {
	k := ring(t, secret(1))
	sealed, err := k.Seal([]byte("spec"), []byte("ns/job"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sealed, "spec") {
		t.Fatal("sealed text shows the plain text")
	}
	if got, err := ring(t, secret(2), secret(1)).Open(sealed, []byte("ns/job")); err != nil || string(got) != "spec" {
		t.Fatalf("Open after rotation = %q, %v", got, err)
	}
	if _, err := k.Open(sealed, []byte("ns/other")); err == nil {
		t.Fatal("a spec sealed for one record opened for another")
	}
	if _, err := ring(t, secret(3)).Open(sealed, []byte("ns/job")); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("Open with a lost key: %v", err)
	}
}

func TestTagProof(t *testing.T) {
	k := ring(t, secret(1))
	desc := k.ProveTag("Suspended by gpushare", "team-a", "train", 3, "gpushare-suspended-for-b")
	if len(desc) > 1000 {
		t.Fatalf("description of %d characters", len(desc))
	}
	tests := []struct {
		name              string
		desc, ns, job, tg string
		version           uint64
		ring              *Keyring
		want              bool
	}{
		{"as written", desc, "team-a", "train", "gpushare-suspended-for-b", 3, k, true},
		{"after a rotation", desc, "team-a", "train", "gpushare-suspended-for-b", 3, ring(t, secret(2), secret(1)), true},
		{"copied to the next version", desc, "team-a", "train", "gpushare-suspended-for-b", 4, k, false},
		{"another job", desc, "team-a", "other", "gpushare-suspended-for-b", 3, k, false},
		{"another name", desc, "team-a", "train", "gpushare-suspended-for-c", 3, k, false},
		{"lost key", desc, "team-a", "train", "gpushare-suspended-for-b", 3, ring(t, secret(3)), false},
		{"no proof", "Suspended by gpushare", "team-a", "train", "gpushare-suspended-for-b", 3, k, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.ring.TagProven(tt.desc, tt.ns, tt.job, tt.version, tt.tg); got != tt.want {
				t.Fatalf("TagProven = %v, want %v", got, tt.want)
			}
		})
	}
	long := k.ProveTag(strings.Repeat("x", 2000), "a", "b", 1, "n")
	if len(long) > 1000 || !k.TagProven(long, "a", "b", 1, "n") {
		t.Fatalf("a long description: %d characters, proven %v", len(long), k.TagProven(long, "a", "b", 1, "n"))
	}
}

func TestParse(t *testing.T) {
	a, b := Encode(secret(1)), Encode(secret(2))
	tests := []struct {
		name    string
		text    string
		want    int
		wantErr string
	}{
		{"one key", a + "\n", 1, ""},
		{"rotation: current then previous", "# rotated\n" + a + "\n" + b + "\n", 2, ""},
		{"space separated", a + " " + b, 2, ""},
		{"empty", "\n# nothing\n", 0, "no key found"},
		{"short", Encode([]byte("short")), 0, "too short"},
		{"not base64", "!!!", 0, "not base64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keys, err := Parse(tt.text)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse: %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || len(keys) != tt.want {
				t.Fatalf("Parse = %d keys, %v; want %d", len(keys), err, tt.want)
			}
		})
	}
}

func FuzzVerify(f *testing.F) {
	k, err := New(secret(1))
	if err != nil {
		f.Fatal(err)
	}
	msg := []byte("record")
	f.Add(k.Sign(msg), k.ProveTag("d", "a", "b", 1, "n"))
	f.Add("v1::", " [gpushare-proof :]")
	f.Fuzz(func(t *testing.T, sig, desc string) {
		// Base64 decoding skips line breaks and hex ignores case: the
		// same MAC written another way is the same proof.
		canon := strings.NewReplacer("\r", "", "\n", "").Replace(sig)
		if _, _, err := k.Verify(msg, sig); err == nil && canon != k.Sign(msg) {
			t.Fatalf("a signature other than the service's verified: %q", sig)
		}
		if k.TagProven(desc, "a", "b", 1, "n") && !strings.HasSuffix(strings.ToLower(desc), k.ProveTag("", "a", "b", 1, "n")) {
			t.Fatalf("a proof other than the service's verified: %q", desc)
		}
		_, _ = Parse(sig + "\n" + desc)
		_, _ = k.Open(sig, []byte("x"))
	})
}
