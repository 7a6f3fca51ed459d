package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"fmt"
	"hash"
	"strings"
)

// Hash is a DH-HMAC-CHAP hash function identifier (NVMe Base 2.0 Figure
// 543 "Hash Function Identifiers"; Linux NVME_AUTH_HASH_*). The same numbers
// name the transformation hash of a secret ("DHHC-1:<hh>:"), where 0 means
// the secret is used untransformed.
type Hash uint8

// Hash functions.
const (
	HashNone   Hash = 0x00 // no transformation (secrets only; never negotiated)
	HashSHA256 Hash = 0x01
	HashSHA384 Hash = 0x02
	HashSHA512 Hash = 0x03
)

// MaxDigestSize is the largest digest of any Hash (SHA-512; Linux
// NVME_AUTH_MAX_DIGEST_SIZE).
const MaxDigestSize = 64

// Size returns the digest size in bytes (32, 48, 64), 0 for HashNone and
// unknown identifiers (Linux nvme_auth_hmac_hash_len).
func (h Hash) Size() int {
	switch h {
	case HashSHA256:
		return 32
	case HashSHA384:
		return 48
	case HashSHA512:
		return 64
	}
	return 0
}

// Valid reports whether h is SHA-256, SHA-384 or SHA-512.
func (h Hash) Valid() bool { return h.Size() != 0 }

// New returns a new hash.Hash computing h; h must be Valid.
func (h Hash) New() hash.Hash {
	switch h {
	case HashSHA256:
		return sha256.New()
	case HashSHA384:
		return sha512.New384()
	case HashSHA512:
		return sha512.New()
	}
	panic(fmt.Sprintf("auth: hash %d has no digest", h))
}

// Sum returns H(data).
func (h Hash) Sum(data []byte) []byte {
	d := h.New()
	d.Write(data)
	return d.Sum(nil)
}

// HMAC returns a new HMAC computing h keyed with key; h must be Valid.
func (h Hash) HMAC(key []byte) hash.Hash { return hmac.New(h.New, key) }

// String returns the name nvmet's configfs uses for dhchap_hash
// ("hmac(sha256)", Linux nvme_auth_hmac_name), "none" for HashNone.
func (h Hash) String() string {
	switch h {
	case HashNone:
		return "none"
	case HashSHA256:
		return "hmac(sha256)"
	case HashSHA384:
		return "hmac(sha384)"
	case HashSHA512:
		return "hmac(sha512)"
	}
	return fmt.Sprintf("hash(%#02x)", uint8(h))
}

// ParseHash parses a hash name: nvmet's "hmac(sha256)", "hmac(sha384)",
// "hmac(sha512)", or "sha256", "sha-256", "SHA-256" and the like
// (case-insensitive). It does not accept "none".
func ParseHash(s string) (Hash, error) {
	n := strings.ToLower(strings.TrimSpace(s))
	n = strings.TrimSuffix(strings.TrimPrefix(n, "hmac("), ")")
	switch strings.ReplaceAll(n, "-", "") {
	case "sha256":
		return HashSHA256, nil
	case "sha384":
		return HashSHA384, nil
	case "sha512":
		return HashSHA512, nil
	}
	return 0, fmt.Errorf("auth: unknown hash %q (want hmac(sha256), hmac(sha384) or hmac(sha512))", s)
}

// DHGroup is a DH-HMAC-CHAP Diffie-Hellman group identifier (NVMe Base 2.0
// Figure 544; Linux NVME_AUTH_DHGROUP_*): the NULL group (no key exchange)
// or an RFC 7919 finite-field group.
type DHGroup uint8

// DH groups.
const (
	DHGroupNull DHGroup = 0x00
	FFDHE2048   DHGroup = 0x01
	FFDHE3072   DHGroup = 0x02
	FFDHE4096   DHGroup = 0x03
	FFDHE6144   DHGroup = 0x04
	FFDHE8192   DHGroup = 0x05
)

// Valid reports whether g is the NULL group or one of the five ffdhe groups.
func (g DHGroup) Valid() bool { return g <= FFDHE8192 }

// String returns the name nvmet's configfs uses for dhchap_dhgroup
// ("null", "ffdhe2048", ...; Linux nvme_auth_dhgroup_name).
func (g DHGroup) String() string {
	switch g {
	case DHGroupNull:
		return "null"
	case FFDHE2048:
		return "ffdhe2048"
	case FFDHE3072:
		return "ffdhe3072"
	case FFDHE4096:
		return "ffdhe4096"
	case FFDHE6144:
		return "ffdhe6144"
	case FFDHE8192:
		return "ffdhe8192"
	}
	return fmt.Sprintf("dhgroup(%#02x)", uint8(g))
}

// ParseDHGroup parses a DH group name as nvmet's configfs takes it:
// "null", "ffdhe2048", "ffdhe3072", "ffdhe4096", "ffdhe6144", "ffdhe8192"
// (case-insensitive; "" is the NULL group).
func ParseDHGroup(s string) (DHGroup, error) {
	n := strings.ToLower(strings.TrimSpace(s))
	if n == "" {
		return DHGroupNull, nil
	}
	for g := DHGroupNull; g <= FFDHE8192; g++ {
		if n == g.String() {
			return g, nil
		}
	}
	return 0, fmt.Errorf("auth: unknown DH group %q (want null or ffdhe2048..ffdhe8192)", s)
}

// AllHashes are the hash functions a Linux host offers, in its order
// (drivers/nvme/host/auth.c nvme_auth_set_dhchap_negotiate_data).
var AllHashes = []Hash{HashSHA256, HashSHA384, HashSHA512}

// AllDHGroups are the DH groups a Linux host offers, in its order.
var AllDHGroups = []DHGroup{DHGroupNull, FFDHE2048, FFDHE3072, FFDHE4096, FFDHE6144, FFDHE8192}
