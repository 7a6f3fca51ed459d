package auth

import (
	"bytes"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFFDHEPrimes recomputes the RFC 7919 primes from their definition,
// p = 2^b - 2^(b-64) + {[2^(b-130) e] + X} * 2^64 - 1 with the X of RFC
// 7919 Appendix A, and compares them with the embedded ones and with
// OpenSSL's (testdata/ffdhe*.hex).
func TestFFDHEPrimes(t *testing.T) {
	xs := map[int]int64{2048: 560316, 3072: 2625351, 4096: 5736041, 6144: 15705020, 8192: 10965728}
	for i, b := range []int{2048, 3072, 4096, 6144, 8192} {
		g := FFDHE2048 + DHGroup(i)
		// floor(2^(b-130) e) with 64 guard bits: the sum of 2^m/k!.
		m := uint(b - 130 + 64)
		sum, term := new(big.Int), new(big.Int).Lsh(big.NewInt(1), m)
		for k := int64(1); term.Sign() > 0; k++ {
			sum.Add(sum, term)
			term.Quo(term, big.NewInt(k))
		}
		sum.Rsh(sum, 64)
		p := new(big.Int).Lsh(big.NewInt(1), uint(b))
		p.Sub(p, new(big.Int).Lsh(big.NewInt(1), uint(b-64)))
		sum.Add(sum, big.NewInt(xs[b]))
		p.Add(p, sum.Lsh(sum, 64))
		p.Sub(p, big.NewInt(1))
		want := fmt.Sprintf("%x", p)
		if ffdheHex[i] != want {
			t.Errorf("%v: embedded prime differs from the RFC 7919 formula", g)
		}
		ossl, err := os.ReadFile(filepath.Join("testdata", fmt.Sprintf("ffdhe%d.hex", b)))
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(string(ossl)) != want {
			t.Errorf("%v: OpenSSL's prime differs from the RFC 7919 formula", g)
		}
		if g.Size() != b/8 || g.params().size != b/8 {
			t.Errorf("%v: size %d", g, g.Size())
		}
	}
	if DHGroupNull.Size() != 0 || DHGroup(6).Size() != 0 || DHGroupNull.params() != nil {
		t.Error("null group has a size")
	}
}

func TestPrivateKeySizes(t *testing.T) {
	want := map[DHGroup]int{FFDHE2048: 256, FFDHE3072: 256, FFDHE4096: 512, FFDHE6144: 512, FFDHE8192: 512}
	for g, n := range want {
		if g.params().privBits != n {
			t.Errorf("%v: %d-bit private keys, Linux uses %d", g, g.params().privBits, n)
		}
	}
	// The reduction against math/big, at its extremes: r ≡ 0 (mod 2^n - 1)
	// gives 1, r ≡ 2^n - 2 gives 2^n - 1.
	ones := bytes.Repeat([]byte{0xFF}, 32)
	for _, in := range [][]byte{
		make([]byte, 40), bytes.Repeat([]byte{0xFF}, 40), append(make([]byte, 8), ones...),
		append(make([]byte, 8), append(bytes.Repeat([]byte{0xFF}, 31), 0xFE)...),
		append([]byte{0, 0, 0, 0, 0, 0, 0, 1}, make([]byte, 32)...),
		append(bytes.Repeat([]byte{0xFF}, 8), make([]byte, 32)...),
		detBytes("r", 40),
	} {
		mod := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))
		want := new(big.Int).Mod(new(big.Int).SetBytes(in), mod)
		want.Add(want, big.NewInt(1))
		x, err := genPrivate(256, bytes.NewReader(in))
		if err != nil || new(big.Int).SetBytes(x).Cmp(want) != 0 || len(x) != 32 {
			t.Errorf("genPrivate(%x) = %x, want %x (%v)", in, x, want, err)
		}
	}
	if _, err := genPrivate(256, bytes.NewReader(make([]byte, 39))); err == nil {
		t.Error("short randomness accepted")
	}
}

func TestPublicValueChecks(t *testing.T) {
	for g := FFDHE2048; g <= FFDHE8192; g++ {
		p, _ := new(big.Int).SetString(ffdheHex[g-1], 16)
		pad := func(x *big.Int) []byte { return x.FillBytes(make([]byte, g.Size())) }
		pm1 := new(big.Int).Sub(p, big.NewInt(1))
		bad := map[string][]byte{
			"0": pad(big.NewInt(0)), "1": pad(big.NewInt(1)), "p-1": pad(pm1), "p": pad(p),
			"p+1":   pad(new(big.Int).Add(p, big.NewInt(1))),
			"max":   bytes.Repeat([]byte{0xFF}, g.Size()),
			"long":  append([]byte{0}, pad(big.NewInt(2))...),
			"empty": nil,
		}
		for name, y := range bad {
			if err := CheckPublicValue(g, y); !errors.Is(err, ErrPublicValue) {
				t.Errorf("%v: %s accepted: %v", g, name, err)
			}
		}
		for name, y := range map[string][]byte{"2": pad(big.NewInt(2)), "p-2": pad(new(big.Int).Sub(p, big.NewInt(2))), "short 2": {2}} {
			if err := CheckPublicValue(g, y); err != nil {
				t.Errorf("%v: %s refused: %v", g, name, err)
			}
		}
		k, err := GenerateDHKey(g, detReader("k"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := k.SharedSecret(pad(pm1)); !errors.Is(err, ErrPublicValue) {
			t.Errorf("%v: SharedSecret(p-1): %v", g, err)
		}
		if err := CheckPublicValue(g, k.PublicValue()); err != nil || k.Group() != g {
			t.Errorf("%v: own public value refused: %v", g, err)
		}
	}
	if err := CheckPublicValue(DHGroupNull, []byte{2}); err == nil {
		t.Error("NULL group public value accepted")
	}
	if _, err := GenerateDHKey(DHGroupNull, detReader("x")); err == nil {
		t.Error("NULL group key generated")
	}
}

func TestHashAndGroupNames(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Hash
	}{{"hmac(sha256)", HashSHA256}, {"sha384", HashSHA384}, {"SHA-512", HashSHA512}, {" HMAC(SHA512) ", HashSHA512}} {
		if h, err := ParseHash(tc.in); err != nil || h != tc.want {
			t.Errorf("ParseHash(%q) = %v, %v", tc.in, h, err)
		}
	}
	for _, bad := range []string{"", "none", "md5", "hmac(sha1)"} {
		if _, err := ParseHash(bad); err == nil {
			t.Errorf("ParseHash(%q) accepted", bad)
		}
	}
	for _, h := range AllHashes {
		if p, err := ParseHash(h.String()); err != nil || p != h || h.New().Size() != h.Size() {
			t.Errorf("%v round trip", h)
		}
	}
	for _, g := range AllDHGroups {
		if p, err := ParseDHGroup(g.String()); err != nil || p != g {
			t.Errorf("%v round trip", g)
		}
	}
	if g, err := ParseDHGroup(""); err != nil || g != DHGroupNull {
		t.Error("empty group")
	}
	if _, err := ParseDHGroup("ffdhe1024"); err == nil {
		t.Error("ffdhe1024 accepted")
	}
	if HashNone.Valid() || Hash(4).Valid() || DHGroup(6).Valid() || Hash(9).String() == "" || DHGroup(9).String() == "" {
		t.Error("invalid IDs")
	}
}
