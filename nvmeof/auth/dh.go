package auth

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"sync"

	"filippo.io/bigmod"
)

// dhParams is one RFC 7919 group: its prime as a bigmod modulus and the
// private key size Linux uses for it.
type dhParams struct {
	p *bigmod.Modulus
	// size is len(p) in bytes: the size of public values and of the shared
	// secret, zero-padded on the left (Linux crypto_kpp_maxsize and
	// mpi_write_to_sgl).
	size int
	// privBits is N, the private exponent size: the power of two at or above
	// twice the group's security strength (Linux crypto/dh.c
	// dh_safe_prime_gen_privkey: 256 bits for ffdhe2048 and ffdhe3072,
	// 512 for ffdhe4096, ffdhe6144 and ffdhe8192).
	privBits int
}

// Security strengths of the groups in bits (NIST SP 800-56A rev 3
// Appendix D; Linux crypto/dh.c max_strength).
var ffdheStrength = [...]int{112, 128, 152, 176, 200}

var ffdheParams [len(ffdheHex)]func() *dhParams

func init() {
	for i := range ffdheHex {
		ffdheParams[i] = sync.OnceValue(func() *dhParams {
			b, err := hex.DecodeString(ffdheHex[i])
			if err != nil {
				panic(err)
			}
			m, err := bigmod.NewModulus(b)
			if err != nil {
				panic(err)
			}
			n := 1
			for n < 2*ffdheStrength[i] {
				n <<= 1
			}
			return &dhParams{p: m, size: len(b), privBits: n}
		})
	}
}

// params returns the group's parameters, nil for the NULL group and
// invalid identifiers.
func (g DHGroup) params() *dhParams {
	if g < FFDHE2048 || g > FFDHE8192 {
		return nil
	}
	return ffdheParams[g-FFDHE2048]()
}

// Size returns the size in bytes of the group's prime, which is the size of
// its public values and shared secrets (256 for ffdhe2048 ... 1024 for
// ffdhe8192), 0 for the NULL group.
func (g DHGroup) Size() int {
	if g < FFDHE2048 || g > FFDHE8192 {
		return 0
	}
	return [...]int{256, 384, 512, 768, 1024}[g-FFDHE2048]
}

// ErrPublicValue is wrapped by the errors for a peer's DH public value that
// is out of range or of a trivial subgroup.
var ErrPublicValue = errors.New("invalid DH public value")

// DHKey is an ephemeral Diffie-Hellman key pair of one ffdhe group.
type DHKey struct {
	group  DHGroup
	x      []byte // private exponent, big-endian
	public []byte // 2^x mod p, big-endian, zero-padded to the group size
}

// GenerateDHKey makes a key pair of group g with randomness from rand the
// way Linux does (crypto/dh.c dh_safe_prime_gen_privkey, NIST SP 800-56A
// rev 3 §5.6.1.1.3): N+64 random bits reduced modulo 2^N - 1, plus one,
// so 1 ≤ x < 2^N with N = 256 or 512 bits (see dhParams.privBits). The
// public value 2^x mod p is computed in constant time (filippo.io/bigmod).
func GenerateDHKey(g DHGroup, rand io.Reader) (*DHKey, error) {
	prm := g.params()
	if prm == nil {
		return nil, fmt.Errorf("auth: DH group %v has no key pair", g)
	}
	x, err := genPrivate(prm.privBits, rand)
	if err != nil {
		return nil, err
	}
	return newDHKey(g, prm, x), nil
}

// newDHKey computes the public value of private exponent x (big-endian).
func newDHKey(g DHGroup, prm *dhParams, x []byte) *DHKey {
	two, err := bigmod.NewNat().SetBytes([]byte{2}, prm.p)
	if err != nil {
		panic(err)
	}
	y := bigmod.NewNat().Exp(two, x, prm.p)
	return &DHKey{group: g, x: x, public: y.Bytes(prm.p)}
}

// genPrivate returns 1 + (r mod (2^n - 1)) for n+64 random bits r, as n/8
// big-endian bytes, without data-dependent branches (the arithmetic of
// Linux dh_safe_prime_gen_privkey).
func genPrivate(n int, rand io.Reader) ([]byte, error) {
	words := n / 64
	buf := make([]byte, (words+1)*8)
	if _, err := io.ReadFull(rand, buf); err != nil {
		return nil, fmt.Errorf("auth: DH private key: %w", err)
	}
	w := make([]uint64, words+1)
	for i := range w {
		w[i] = binary.BigEndian.Uint64(buf[8*i:])
	}
	clear(buf)
	// r = h·2^n + l ≡ h + l (mod 2^n - 1), since 2^n ≡ 1. Adding h to l
	// may carry once more into 2^n, which folds back the same way; the
	// second fold cannot carry.
	l := w[1:]
	c := addWord(l, w[0])
	addWord(l, c)
	// +1; if l was 2^n - 1 (≡ 0), it wraps to 0 with a carry, and the
	// result must be 1.
	c = addWord(l, 1)
	l[words-1] |= c
	x := make([]byte, words*8)
	for i, v := range l {
		binary.BigEndian.PutUint64(x[8*i:], v)
	}
	clear(w)
	return x, nil
}

// addWord adds v to the big-endian word array l and returns the carry out.
func addWord(l []uint64, v uint64) uint64 {
	c := v
	for i := len(l) - 1; i >= 0; i-- {
		l[i], c = bits.Add64(l[i], c, 0)
	}
	return c
}

// Group returns the key's DH group.
func (k *DHKey) Group() DHGroup { return k.group }

// PublicValue returns the public value 2^x mod p, big-endian and
// zero-padded to the group size (what Linux puts in DHV).
func (k *DHKey) PublicValue() []byte { return k.public }

// SharedSecret returns the shared secret Z = y^x mod p for the peer's
// public value y, big-endian and zero-padded to the group size (Linux
// nvme_auth_gen_shared_secret output, the input of the session key). It
// returns an error wrapping ErrPublicValue if y is not a valid public value
// (see CheckPublicValue).
func (k *DHKey) SharedSecret(peer []byte) ([]byte, error) {
	prm := k.group.params()
	y, err := publicNat(prm, peer)
	if err != nil {
		return nil, fmt.Errorf("auth: %v: %w", k.group, err)
	}
	z := bigmod.NewNat().Exp(y, k.x, prm.p)
	// NIST SP 800-56A rev 3 §5.7.1.1: Z must not be 1 or p-1 (it cannot be
	// for a checked y and 1 ≤ x < q, but the check is cheap).
	if z.IsOne()|z.IsMinusOne(prm.p) == 1 {
		return nil, fmt.Errorf("auth: %v: shared secret is trivial: %w", k.group, ErrPublicValue)
	}
	return z.Bytes(prm.p), nil
}

// CheckPublicValue checks a peer's DH public value for group g: it must be
// a big-endian number of at most the group size in bytes with 2 ≤ y ≤ p-2.
// That is Linux crypto/dh.c dh_is_pubkey_valid's range check (NIST SP
// 800-56A rev 3 §5.6.2.3.1 step 1), with p-1 excluded as well: for a safe
// prime p = 2q+1 the only small subgroup is {1, p-1}, so the range check
// leaves no small-subgroup confinement (the y^q = 1 test Linux adds in FIPS
// mode would cost a full-size exponentiation).
func CheckPublicValue(g DHGroup, y []byte) error {
	prm := g.params()
	if prm == nil {
		return fmt.Errorf("auth: DH group %v has no public values", g)
	}
	if _, err := publicNat(prm, y); err != nil {
		return fmt.Errorf("auth: %v: %w", g, err)
	}
	return nil
}

func publicNat(prm *dhParams, b []byte) (*bigmod.Nat, error) {
	if len(b) == 0 || len(b) > prm.size {
		return nil, fmt.Errorf("%d-byte public value, want 1..%d: %w", len(b), prm.size, ErrPublicValue)
	}
	y, err := bigmod.NewNat().SetBytes(b, prm.p)
	if err != nil {
		return nil, fmt.Errorf("public value not below p: %w", ErrPublicValue)
	}
	if y.IsZero()|y.IsOne()|y.IsMinusOne(prm.p) == 1 {
		return nil, fmt.Errorf("public value is 0, 1 or p-1: %w", ErrPublicValue)
	}
	return y, nil
}
