package auth

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
)

// The DH-HMAC-CHAP computations (NVMe Base 2.0 §8.13.5; TP 8006), as Linux
// does them (drivers/nvme/common/auth.c, drivers/nvme/host/auth.c
// nvme_auth_dhchap_setup_host_response/_ctrl_response,
// drivers/nvme/target/auth.c nvmet_auth_host_hash/_ctrl_hash).

// transformSuffix is appended to the NQN in the key transformation.
const transformSuffix = "NVMe-over-Fabrics"

// TransformKey returns the key a secret yields for an NQN (Linux
// nvme_auth_transform_key): the secret itself when its hash is HashNone,
// else HMAC(secret, NQN || "NVMe-over-Fabrics") with the secret's hash. The
// host key is transformed with the host NQN, the controller key with the
// subsystem NQN; the result keys the HMAC of the responses.
func TransformKey(s *Secret, nqn string) []byte {
	if s.Hash == HashNone {
		return append([]byte(nil), s.Key...)
	}
	m := s.Hash.HMAC(s.Key)
	m.Write([]byte(nqn))
	m.Write([]byte(transformSuffix))
	return m.Sum(nil)
}

// SessionKey returns Ks = H(Z) for the DH shared secret Z (zero-padded to
// the group size as SharedSecret returns it).
func SessionKey(h Hash, z []byte) []byte { return h.Sum(z) }

// AugmentedChallenge returns Ca = HMAC(H(Z), C): the challenge a response is
// computed over when a DH group is in use (Linux
// nvme_auth_augmented_challenge; z is the shared secret as SharedSecret
// returns it, c the challenge C1 or C2).
func AugmentedChallenge(h Hash, z, c []byte) []byte {
	m := h.HMAC(SessionKey(h, z))
	m.Write(c)
	return m.Sum(nil)
}

// HostResponse returns the host's response
//
//	R1 = HMAC(Kh, C1 || SEQNUM1 || T_ID || 00h || "HostHost" || NQNh || 00h || NQNc)
//
// with Kh the transformed host key (TransformKey(host secret, host NQN)),
// c the challenge C1 (augmented when a DH group is used), SEQNUM1 as 4
// little-endian bytes and T_ID as 2 (NVMe Base 2.0 §8.13.5.4; Linux
// nvme_auth_dhchap_setup_host_response, nvmet_auth_host_hash).
func HostResponse(h Hash, key, c []byte, seqnum uint32, tid uint16, hostNQN, subNQN string) []byte {
	return response(h, key, c, seqnum, tid, "HostHost", hostNQN, subNQN)
}

// ControllerResponse returns the controller's response
//
//	R2 = HMAC(Kc, C2 || SEQNUM2 || T_ID || 00h || "Controller" || NQNc || 00h || NQNh)
//
// with Kc the transformed controller key (TransformKey(controller secret,
// subsystem NQN)) and c the challenge C2, augmented when a DH group is used
// (Linux nvme_auth_dhchap_setup_ctrl_response, nvmet_auth_ctrl_hash).
func ControllerResponse(h Hash, key, c []byte, seqnum uint32, tid uint16, subNQN, hostNQN string) []byte {
	return response(h, key, c, seqnum, tid, "Controller", subNQN, hostNQN)
}

func response(h Hash, key, c []byte, seqnum uint32, tid uint16, role, nqn1, nqn2 string) []byte {
	m := h.HMAC(key)
	m.Write(c)
	var buf [7]byte
	binary.LittleEndian.PutUint32(buf[0:], seqnum)
	binary.LittleEndian.PutUint16(buf[4:], tid)
	m.Write(buf[:7]) // SEQNUM, T_ID, 00h
	m.Write([]byte(role))
	m.Write([]byte(nqn1))
	m.Write(buf[6:7])
	m.Write([]byte(nqn2))
	return m.Sum(nil)
}

// GeneratePSK returns the generated PSK for TLS, HMAC(Z, C1 || C2) keyed
// with the DH shared secret (NVMe Base 2.1 §8.3.5.5.9; Linux
// nvme_auth_generate_psk as nvmet_auth_insert_psk calls it). Only secure
// channel concatenation on NVMe/TCP uses it; NVMe/RDMA has no TLS.
func GeneratePSK(h Hash, z, c1, c2 []byte) []byte {
	m := h.HMAC(z)
	m.Write(c1)
	m.Write(c2)
	return m.Sum(nil)
}

// PSKDigest returns the TLS PSK digest Base64(HMAC(PSK, NQNh || " " ||
// NQNc || " NVMe-over-Fabrics")) for SHA-256 or SHA-384 (TP 8018 §3.6.1.3;
// Linux nvme_auth_generate_digest).
func PSKDigest(h Hash, psk []byte, subNQN, hostNQN string) (string, error) {
	if h != HashSHA256 && h != HashSHA384 {
		return "", fmt.Errorf("auth: PSK digest needs SHA-256 or SHA-384, not %v", h)
	}
	m := h.HMAC(psk)
	m.Write([]byte(hostNQN + " " + subNQN + " " + transformSuffix))
	return base64.StdEncoding.EncodeToString(m.Sum(nil)), nil
}
