package auth

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// vectors is testdata/vectors.json, written by testdata/linuxref.py: an
// independent Python implementation of Linux's computations (hashlib, hmac,
// pow) and message layouts (struct.pack of include/linux/nvme.h).
type vectors struct {
	HostNQN string `json:"hostnqn"`
	SubNQN  string `json:"subnqn"`
	Secrets []struct {
		Hash    int    `json:"hash"`
		Key     string `json:"key"`
		Encoded string `json:"encoded"`
	} `json:"secrets"`
	Transforms []struct {
		Hash int    `json:"hash"`
		Key  string `json:"key"`
		NQN  string `json:"nqn"`
		Out  string `json:"out"`
	} `json:"transforms"`
	RawResponses []map[string]any `json:"responses"`
	DH           []struct {
		Group int               `json:"group"`
		XH    string            `json:"xh"`
		XC    string            `json:"xc"`
		YH    string            `json:"yh"`
		YC    string            `json:"yc"`
		Z     string            `json:"z"`
		Aug   map[string]string `json:"aug"`
	} `json:"dh"`
	PrivKeys []struct {
		Group  int    `json:"group"`
		Random string `json:"random"`
		X      string `json:"x"`
	} `json:"privkeys"`
	PSK []struct {
		Hash   int    `json:"hash"`
		Z      string `json:"z"`
		C1     string `json:"c1"`
		C2     string `json:"c2"`
		PSK    string `json:"psk"`
		Digest string `json:"digest"`
	} `json:"psk"`
	Messages map[string]string `json:"messages"`
}

func loadVectors(t testing.TB) *vectors {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v vectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return &v
}

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestVectorsUpToDate regenerates the vectors with the Python reference and
// compares them with the committed file.
func TestVectorsUpToDate(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: cannot rerun testdata/linuxref.py (the committed vectors are still checked)")
	}
	out, err := exec.Command(py, filepath.Join("testdata", "linuxref.py"), "vectors").Output()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(filepath.Join("testdata", "vectors.json"))
	if !bytes.Equal(out, want) {
		t.Fatal("testdata/vectors.json differs from linuxref.py's output; regenerate it")
	}
}

func TestVectorsSecrets(t *testing.T) {
	v := loadVectors(t)
	for _, s := range v.Secrets {
		sec := &Secret{Hash: Hash(s.Hash), Key: unhex(t, s.Key)}
		if got := sec.Encode(); got != s.Encoded {
			t.Errorf("Encode(%d, %d bytes) = %s, want %s", s.Hash, len(sec.Key), got, s.Encoded)
		}
		p, err := ParseSecret(s.Encoded)
		if err != nil || p.Hash != sec.Hash || !bytes.Equal(p.Key, sec.Key) {
			t.Errorf("ParseSecret(%s) = %v, %v", s.Encoded, p, err)
		}
	}
}

func TestVectorsTransform(t *testing.T) {
	v := loadVectors(t)
	for _, x := range v.Transforms {
		got := TransformKey(&Secret{Hash: Hash(x.Hash), Key: unhex(t, x.Key)}, x.NQN)
		if hex.EncodeToString(got) != x.Out {
			t.Errorf("TransformKey hash %d = %x, want %s", x.Hash, got, x.Out)
		}
	}
}

func TestVectorsResponses(t *testing.T) {
	v := loadVectors(t)
	if len(v.RawResponses) != 3 {
		t.Fatalf("%d response vectors", len(v.RawResponses))
	}
	for _, r := range v.RawResponses {
		s := func(k string) []byte { return unhex(t, r[k].(string)) }
		n := func(k string) uint32 { return uint32(r[k].(float64)) }
		h := Hash(n("hash"))
		tid := uint16(n("tid"))
		if got := HostResponse(h, s("kh"), s("c1"), n("seq1"), tid, v.HostNQN, v.SubNQN); !bytes.Equal(got, s("r1")) {
			t.Errorf("%v: R1 = %x, want %x", h, got, s("r1"))
		}
		if got := ControllerResponse(h, s("kc"), s("c2"), n("seq2"), tid, v.SubNQN, v.HostNQN); !bytes.Equal(got, s("r2")) {
			t.Errorf("%v: R2 = %x, want %x", h, got, s("r2"))
		}
	}
}

func TestVectorsDH(t *testing.T) {
	v := loadVectors(t)
	if len(v.DH) != 5 {
		t.Fatalf("%d DH vectors", len(v.DH))
	}
	for _, d := range v.DH {
		g := DHGroup(d.Group)
		kh := newDHKey(g, g.params(), unhex(t, d.XH))
		kc := newDHKey(g, g.params(), unhex(t, d.XC))
		if hex.EncodeToString(kh.PublicValue()) != d.YH || hex.EncodeToString(kc.PublicValue()) != d.YC {
			t.Fatalf("%v: public values differ from Python's pow()", g)
		}
		z1, err1 := kh.SharedSecret(kc.PublicValue())
		z2, err2 := kc.SharedSecret(kh.PublicValue())
		if err1 != nil || err2 != nil || hex.EncodeToString(z1) != d.Z || !bytes.Equal(z1, z2) {
			t.Fatalf("%v: shared secret: %v %v", g, err1, err2)
		}
		if len(z1) != g.Size() {
			t.Errorf("%v: shared secret of %d bytes", g, len(z1))
		}
		for hs, want := range d.Aug {
			h := Hash(hs[0] - '0')
			c := unhex(t, v.RawResponses[h-1]["c1"].(string))
			if got := AugmentedChallenge(h, z1, c); hex.EncodeToString(got) != want {
				t.Errorf("%v %v: augmented challenge %x, want %s", g, h, got, want)
			}
		}
	}
	for _, p := range v.PrivKeys {
		g := DHGroup(p.Group)
		x, err := genPrivate(g.params().privBits, bytes.NewReader(unhex(t, p.Random)))
		if err != nil || hex.EncodeToString(x) != p.X {
			t.Errorf("%v: private key %x, want %s (%v)", g, x, p.X, err)
		}
	}
}

func TestVectorsPSK(t *testing.T) {
	v := loadVectors(t)
	for _, p := range v.PSK {
		h := Hash(p.Hash)
		psk := GeneratePSK(h, unhex(t, p.Z), unhex(t, p.C1), unhex(t, p.C2))
		if hex.EncodeToString(psk) != p.PSK {
			t.Errorf("%v: PSK %x, want %s", h, psk, p.PSK)
		}
		d, err := PSKDigest(h, psk, v.SubNQN, v.HostNQN)
		if p.Digest == "" {
			if err == nil {
				t.Errorf("%v: digest without error", h)
			}
		} else if err != nil || d != p.Digest {
			t.Errorf("%v: digest %s, want %s (%v)", h, d, p.Digest, err)
		}
	}
}

// TestVectorsMessages checks the encoders against the struct.pack layouts of
// include/linux/nvme.h and the decoders on them.
func TestVectorsMessages(t *testing.T) {
	v := loadVectors(t)
	m := v.Messages
	det := func(label string, n int) []byte { return detBytes(label, n) }
	pub := func(x int64) []byte {
		k := newDHKey(FFDHE2048, FFDHE2048.params(), big.NewInt(x).Bytes())
		return k.PublicValue()
	}
	for _, tc := range []struct {
		name string
		enc  []byte
	}{
		{"negotiate", AppendNegotiate(nil, NewNegotiate(7, AllHashes, AllDHGroups))},
		{"challenge_null", AppendChallenge(nil, &Challenge{TID: 7, Hash: HashSHA256, Seqnum: 0x01020304, C: det("c1/1", 32)})},
		{"challenge_2048", AppendChallenge(nil, &Challenge{TID: 7, Hash: HashSHA384, DHGroup: FFDHE2048, Seqnum: 0x01020304, C: det("c1/2", 48), DHValue: pub(5)})},
		{"reply_uni", AppendReply(nil, &Reply{TID: 7, R: det("r1", 32)})},
		{"reply_bi_2048", AppendReply(nil, &Reply{TID: 7, R: det("r1", 48), CValid: true, Seqnum: 0xA0B0C0D0, C: det("c2/2", 48), DHValue: pub(7)})},
		{"success1", AppendSuccess1(nil, &Success1{TID: 7, HL: 32})},
		{"success1_r2", AppendSuccess1(nil, &Success1{TID: 7, HL: 64, RValid: true, R: det("r2", 64)})},
		{"success2", AppendSuccess2(nil, &Success2{TID: 7})},
		{"failure1", AppendFailure(nil, &Failure{ID: MsgFailure1, TID: 7, Reason: ReasonFailed, Explanation: ExplFailed})},
		{"failure2", AppendFailure(nil, &Failure{ID: MsgFailure2, TID: 7, Reason: ReasonFailed, Explanation: ExplIncorrectPayload})},
	} {
		if got := hex.EncodeToString(tc.enc); got != m[tc.name] {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, m[tc.name])
		}
	}
	n, err := ParseNegotiate(unhex(t, m["negotiate"]))
	if err != nil || n.TID != 7 || len(n.Protocols) != 1 || n.Protocols[0].AuthID != AuthIDDHCHAP ||
		len(n.Protocols[0].Hashes) != 3 || len(n.Protocols[0].DHGroups) != 6 || n.Protocols[0].DHGroups[5] != FFDHE8192 {
		t.Errorf("ParseNegotiate: %+v %v", n, err)
	}
	c, err := ParseChallenge(unhex(t, m["challenge_2048"]))
	if err != nil || c.TID != 7 || c.Hash != HashSHA384 || c.DHGroup != FFDHE2048 || c.Seqnum != 0x01020304 ||
		!bytes.Equal(c.C, det("c1/2", 48)) || !bytes.Equal(c.DHValue, pub(5)) {
		t.Errorf("ParseChallenge: %+v %v", c, err)
	}
	r, err := ParseReply(unhex(t, m["reply_bi_2048"]))
	if err != nil || !r.CValid || r.Seqnum != 0xA0B0C0D0 || !bytes.Equal(r.R, det("r1", 48)) ||
		!bytes.Equal(r.C, det("c2/2", 48)) || !bytes.Equal(r.DHValue, pub(7)) {
		t.Errorf("ParseReply: %+v %v", r, err)
	}
	s, err := ParseSuccess1(unhex(t, m["success1_r2"]))
	if err != nil || !s.RValid || s.HL != 64 || !bytes.Equal(s.R, det("r2", 64)) {
		t.Errorf("ParseSuccess1: %+v %v", s, err)
	}
	f, err := ParseFailure(unhex(t, m["failure2"]))
	if err != nil || f.ID != MsgFailure2 || f.Reason != ReasonFailed || f.Explanation != ExplIncorrectPayload {
		t.Errorf("ParseFailure: %+v %v", f, err)
	}
}

// detBytes is linuxref.py's det(): SHA-512 in counter mode over a label.
func detBytes(label string, n int) []byte {
	var out []byte
	for i := 0; len(out) < n; i++ {
		out = append(out, HashSHA512.Sum([]byte(label+"/"+itoa(i)))...)
	}
	return out[:n]
}

func itoa(i int) string { return strings.TrimSpace(big.NewInt(int64(i)).String()) }
