package auth

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
)

// ErrInvalidSecret is wrapped by the errors of ParseSecret.
var ErrInvalidSecret = errors.New("invalid DH-HMAC-CHAP secret")

// Secret is a DH-HMAC-CHAP secret (a host key or a controller key) in the
// representation of NVMe Base 2.0 §8.13.5.8 and nvme-cli:
//
//	DHHC-1:<hh>:<base64 of key || CRC-32(key) little-endian>:
//
// <hh> is the two-digit hash of the key transformation (00 none, 01 SHA-256,
// 02 SHA-384, 03 SHA-512); the key is 32, 48 or 64 bytes, and when <hh> is
// not 00, exactly the hash's size (Linux nvme_auth_extract_key,
// nvme_auth_parse_key; nvme-cli check-dhchap-key).
type Secret struct {
	Hash Hash   // transformation hash, HashNone for an untransformed key
	Key  []byte // 32, 48 or 64 bytes
}

const secretPrefix = "DHHC-1:"

// ParseSecret parses the representation of a secret. Surrounding white
// space and a missing final ':' are accepted (the kernel takes both); the
// CRC must match.
func ParseSecret(s string) (*Secret, error) {
	t := strings.TrimSpace(s)
	rest, ok := strings.CutPrefix(t, secretPrefix)
	if !ok || len(rest) < 3 || rest[2] != ':' {
		return nil, fmt.Errorf("auth: secret does not start with DHHC-1:<hh>: (%w)", ErrInvalidSecret)
	}
	if rest[0] != '0' || rest[1] < '0' || rest[1] > '3' {
		return nil, fmt.Errorf("auth: secret transformation hash %q, want 00..03 (%w)", rest[:2], ErrInvalidSecret)
	}
	h := Hash(rest[1] - '0')
	enc := strings.TrimSuffix(rest[3:], ":")
	if strings.ContainsRune(enc, ':') {
		return nil, fmt.Errorf("auth: secret has data after the key (%w)", ErrInvalidSecret)
	}
	raw, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return nil, fmt.Errorf("auth: secret key is not base64: %v (%w)", err, ErrInvalidSecret)
	}
	if n := len(raw); n != 36 && n != 52 && n != 68 {
		return nil, fmt.Errorf("auth: secret key of %d bytes with its CRC, want 36, 52 or 68 (%w)", n, ErrInvalidSecret)
	}
	key, crc := raw[:len(raw)-4], binary.LittleEndian.Uint32(raw[len(raw)-4:])
	if want := crc32.ChecksumIEEE(key); crc != want {
		return nil, fmt.Errorf("auth: secret CRC %08x, computed %08x (%w)", crc, want, ErrInvalidSecret)
	}
	sec := &Secret{Hash: h, Key: key}
	if err := sec.Validate(); err != nil {
		return nil, err
	}
	return sec, nil
}

// Validate checks what ParseSecret checks of a secret made otherwise: a
// transformation hash of 0..3 and a key of 32, 48 or 64 bytes, of the hash's
// size when there is one.
func (s *Secret) Validate() error {
	switch {
	case s.Hash != HashNone && !s.Hash.Valid():
		return fmt.Errorf("auth: secret transformation hash %d, want 0..3 (%w)", uint8(s.Hash), ErrInvalidSecret)
	case len(s.Key) != 32 && len(s.Key) != 48 && len(s.Key) != 64:
		return fmt.Errorf("auth: %d-byte secret, want 32, 48 or 64 (%w)", len(s.Key), ErrInvalidSecret)
	case s.Hash != HashNone && len(s.Key) != s.Hash.Size():
		return fmt.Errorf("auth: %d-byte secret transformed with %v needs %d bytes (%w)", len(s.Key), s.Hash, s.Hash.Size(), ErrInvalidSecret)
	}
	return nil
}

// Encode returns the representation of the secret,
// "DHHC-1:<hh>:<base64>:" (nvme gen-dhchap-key's output format).
func (s *Secret) Encode() string {
	raw := binary.LittleEndian.AppendUint32(append([]byte(nil), s.Key...), crc32.ChecksumIEEE(s.Key))
	return fmt.Sprintf("%s%02x:%s:", secretPrefix, uint8(s.Hash), base64.StdEncoding.EncodeToString(raw))
}

// String returns the representation with the key elided, so that a secret
// that reaches a log does not disclose the key; use Encode for the secret.
func (s *Secret) String() string {
	return fmt.Sprintf("%s%02x:<%d-byte key>:", secretPrefix, uint8(s.Hash), len(s.Key))
}

// KeyOptions are the options of GenerateKey, those of nvme-cli 2.x
// gen-dhchap-key.
type KeyOptions struct {
	// Secret is the key in hexadecimal (--secret, -s); empty for a random one.
	Secret string
	// KeyLength is the key length in bytes, 32, 48 or 64 (--key-length,
	// -l); 0 for the hash's size, or 32 without a hash.
	KeyLength int
	// HMAC is the transformation hash, 0 none, 1 SHA-256, 2 SHA-384, 3
	// SHA-512 (--hmac, -m).
	HMAC int
	// NQN is the host NQN of the transformation (--nqn, -n; nvme-cli
	// defaults to /etc/nvme/hostnqn). Required.
	NQN string
}

// GenerateKey makes a DH-HMAC-CHAP host key like nvme gen-dhchap-key
// (nvme-cli nvme.c gen_dhchap_key, libnvme nvme_gen_dhchap_key): a random
// key (from rand) or opt.Secret, transformed with opt.NQN when opt.HMAC is
// not 0 (HMAC(key, NQN || "NVMe-over-Fabrics")), in the DHHC-1
// representation without a trailing newline. The errors are nvme-cli's
// messages.
func GenerateKey(opt KeyOptions, rand io.Reader) (string, error) {
	if opt.HMAC < 0 || opt.HMAC > 3 {
		return "", fmt.Errorf("Invalid HMAC identifier %d", opt.HMAC)
	}
	h := Hash(opt.HMAC)
	n := opt.KeyLength
	if h != HashNone {
		if n == 0 {
			n = h.Size()
		} else if n != h.Size() {
			return "", fmt.Errorf("Invalid key length %d for SHA(%d)", n, 8*h.Size())
		}
	} else if n == 0 {
		n = 32
	}
	if n != 32 && n != 48 && n != 64 {
		return "", fmt.Errorf("Invalid key length %d", n)
	}
	var raw []byte
	if opt.Secret == "" {
		raw = make([]byte, n)
		if _, err := io.ReadFull(rand, raw); err != nil {
			return "", fmt.Errorf("random key: %w", err)
		}
	} else {
		var err error
		if raw, err = hex.DecodeString(opt.Secret); err != nil {
			return "", fmt.Errorf("Invalid secret '%s'", opt.Secret)
		}
		if len(raw) != n {
			return "", fmt.Errorf("Invalid key length (%d bytes)", len(raw))
		}
	}
	if opt.NQN == "" {
		return "", errors.New("Could not read host NQN")
	}
	key := TransformKey(&Secret{Hash: h, Key: raw}, opt.NQN)
	return (&Secret{Hash: h, Key: key}).Encode(), nil
}
