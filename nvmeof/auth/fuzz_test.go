package auth

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"reflect"
	"testing"

	"github.com/nvmetd/nvmetd/internal/testing/fuzzseed"

	"github.com/nvmetd/nvmetd/nvmeof"
)

var update = flag.Bool("update", false, "rewrite the fuzz seed corpora under testdata/fuzz")

// goldenMessages returns the Linux-layout messages of testdata/vectors.json.
func goldenMessages(t testing.TB) map[string][]byte {
	v := loadVectors(t)
	m := map[string][]byte{}
	for k, h := range v.Messages {
		m[k] = unhex(t, h)
	}
	return m
}

// decoders are the decoders of network bytes, each with its golden inputs.
var decoders = []struct {
	name   string
	golden []string
	parse  func([]byte) (any, error)
	encode func(any) []byte
}{
	{"Negotiate", []string{"negotiate"},
		func(b []byte) (any, error) { return ParseNegotiate(b) },
		func(m any) []byte { return AppendNegotiate(nil, m.(*Negotiate)) }},
	{"Challenge", []string{"challenge_null", "challenge_2048"},
		func(b []byte) (any, error) { return ParseChallenge(b) },
		func(m any) []byte { return AppendChallenge(nil, m.(*Challenge)) }},
	{"Reply", []string{"reply_uni", "reply_bi_2048"},
		func(b []byte) (any, error) { return ParseReply(b) },
		func(m any) []byte { return AppendReply(nil, m.(*Reply)) }},
	{"Success1", []string{"success1", "success1_r2"},
		func(b []byte) (any, error) { return ParseSuccess1(b) },
		func(m any) []byte { return AppendSuccess1(nil, m.(*Success1)) }},
	{"Success2", []string{"success2"},
		func(b []byte) (any, error) { return ParseSuccess2(b) },
		func(m any) []byte { return AppendSuccess2(nil, m.(*Success2)) }},
	{"Failure", []string{"failure1", "failure2"},
		func(b []byte) (any, error) { return ParseFailure(b) },
		func(m any) []byte { return AppendFailure(nil, m.(*Failure)) }},
	{"Header", []string{"negotiate", "failure1"},
		func(b []byte) (any, error) { h, err := ParseHeader(b); return &h, err },
		nil},
}

// TestTruncatedPrefixes: every truncated prefix of every message decodes to
// an error, never a panic.
func TestTruncatedPrefixes(t *testing.T) {
	g := goldenMessages(t)
	for _, d := range decoders {
		for _, name := range d.golden {
			valid := g[name]
			if d.name == "Header" {
				valid = valid[:HeaderSize]
			}
			if _, err := d.parse(valid); err != nil {
				t.Fatalf("%s %s: %v", d.name, name, err)
			}
			for n := 0; n < len(valid); n++ {
				p := append([]byte(nil), valid[:n]...)
				func() {
					defer func() {
						if r := recover(); r != nil {
							t.Fatalf("%s %s: prefix of %d bytes: panic %v", d.name, name, n, r)
						}
					}()
					if _, err := d.parse(p); !errors.Is(err, nvmeof.ErrTruncated) {
						t.Fatalf("%s %s: prefix of %d bytes: %v", d.name, name, n, err)
					}
				}()
			}
		}
	}
	// Messages of the wrong type are malformed.
	if _, err := ParseChallenge(g["reply_uni"]); !errors.Is(err, nvmeof.ErrMalformed) {
		t.Errorf("reply as challenge: %v", err)
	}
	if _, err := ParseFailure(g["success2"][:8]); !errors.Is(err, nvmeof.ErrMalformed) {
		t.Errorf("success2 as failure: %v", err)
	}
	bad := append([]byte(nil), g["negotiate"]...)
	bad[11] = 31
	if _, err := ParseNegotiate(bad); !errors.Is(err, nvmeof.ErrMalformed) {
		t.Errorf("DHLEN 31: %v", err)
	}
}

// fuzzDecoder checks that a decoder never panics and that what it accepts
// re-encodes to bytes that decode to the same message.
func fuzzDecoder(f *testing.F, name string) {
	for _, d := range decoders {
		if d.name != name {
			continue
		}
		for _, g := range d.golden {
			f.Add(goldenMessages(f)[g])
		}
		f.Fuzz(func(t *testing.T, b []byte) {
			m, err := d.parse(b)
			if err != nil {
				if !errors.Is(err, nvmeof.ErrTruncated) && !errors.Is(err, nvmeof.ErrMalformed) {
					t.Fatalf("error of no kind: %v", err)
				}
				return
			}
			if d.encode == nil {
				return
			}
			enc := d.encode(m)
			m2, err := d.parse(enc)
			if err != nil || !reflect.DeepEqual(normalize(m), normalize(m2)) {
				t.Fatalf("round trip: %v\n%+v\n%+v", err, m, m2)
			}
		})
	}
}

// normalize makes decoded messages comparable: empty slices as nil.
func normalize(m any) string {
	return fmt.Sprintf("%+v", m)
}

func FuzzNegotiate(f *testing.F) { fuzzDecoder(f, "Negotiate") }
func FuzzChallenge(f *testing.F) { fuzzDecoder(f, "Challenge") }
func FuzzReply(f *testing.F)     { fuzzDecoder(f, "Reply") }
func FuzzSuccess1(f *testing.F)  { fuzzDecoder(f, "Success1") }
func FuzzSuccess2(f *testing.F)  { fuzzDecoder(f, "Success2") }
func FuzzFailure(f *testing.F)   { fuzzDecoder(f, "Failure") }
func FuzzHeader(f *testing.F)    { fuzzDecoder(f, "Header") }

func FuzzParseSecret(f *testing.F) {
	for _, s := range loadVectors(f).Secrets {
		f.Add(s.Encoded)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sec, err := ParseSecret(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidSecret) {
				t.Fatalf("error of no kind: %v", err)
			}
			return
		}
		again, err := ParseSecret(sec.Encode())
		if err != nil || again.Hash != sec.Hash || !bytes.Equal(again.Key, sec.Key) {
			t.Fatalf("round trip of %q: %v", s, err)
		}
	})
}

// FuzzControllerSend feeds a controller, in the state after the host's
// AUTH_Negotiate and the challenge (state 1) or fresh (state 0), an
// arbitrary Authentication Send and then a Receive, as a hostile host
// would: it must answer, never panic, and never authenticate the queue.
func FuzzControllerSend(f *testing.F) {
	for _, m := range goldenMessages(f) {
		f.Add(uint8(0), m)
		f.Add(uint8(1), m)
	}
	f.Fuzz(func(t *testing.T, state uint8, b []byte) {
		c := mustController(t, ControllerConfig{SubNQN: testSubNQN, HostNQN: testHostNQN, HostSecret: hostSecret,
			CtrlSecret: ctrlSecret, DHGroup: FFDHE2048, Rand: detReader("fuzz")})
		if state&1 == 1 {
			neg := AppendNegotiate(nil, NewNegotiate(7, AllHashes, AllDHGroups))
			c.Send(sqe(true, uint32(len(neg))), neg)
			c.Receive(sqe(false, 4096), 4096)
		}
		if len(b) > 0 {
			r := c.Send(sqe(true, uint32(len(b))), b)
			if r.Authenticated {
				t.Fatal("authenticated by a forged message")
			}
		}
		r := c.Receive(sqe(false, 4096), 4096)
		if len(r.Data) > 4096 || r.Authenticated {
			t.Fatalf("receive: %d bytes, authenticated %v", len(r.Data), r.Authenticated)
		}
		c.Expire()
	})
}

// FuzzHostReceive gives a host arbitrary data as the controller's challenge
// (state 0) or, after a real challenge, as its Success1 (state 1).
func FuzzHostReceive(f *testing.F) {
	for _, m := range goldenMessages(f) {
		f.Add(uint8(0), m)
		f.Add(uint8(1), m)
	}
	f.Fuzz(func(t *testing.T, state uint8, b []byte) {
		h, _ := NewHost(HostConfig{HostNQN: testHostNQN, SubNQN: testSubNQN, Secret: hostSecret, CtrlSecret: ctrlSecret, Rand: detReader("fuzz")})
		h.Start(7)
		step := h.Complete(0, nil)
		if state&1 == 1 {
			ch := AppendChallenge(nil, &Challenge{TID: 7, Hash: HashSHA256, Seqnum: 1, C: make([]byte, 32)})
			if step = h.Complete(0, ch); step.Action != HostSend {
				t.Fatalf("reply: %+v", step)
			}
			step = h.Complete(0, nil)
		}
		step = h.Complete(0, b)
		for i := 0; step.Action != HostDone; i++ {
			if i > 3 {
				t.Fatal("no end")
			}
			step = h.Complete(0, nil)
		}
		if step.Err == nil {
			t.Fatal("authenticated by forged data")
		}
	})
}

// TestFuzzSeeds writes (with -update) or checks the seed corpora.
func TestFuzzSeeds(t *testing.T) {
	g := goldenMessages(t)
	seeds := map[string][][]any{}
	for _, d := range decoders {
		for _, name := range d.golden {
			seeds["Fuzz"+d.name] = append(seeds["Fuzz"+d.name], []any{g[name]})
		}
	}
	for _, s := range loadVectors(t).Secrets {
		seeds["FuzzParseSecret"] = append(seeds["FuzzParseSecret"], []any{s.Encoded})
	}
	for _, name := range []string{"negotiate", "reply_uni", "success2", "failure2"} {
		for _, st := range []uint8{0, 1} {
			seeds["FuzzControllerSend"] = append(seeds["FuzzControllerSend"], []any{st, g[name]})
		}
	}
	for _, name := range []string{"challenge_null", "challenge_2048", "success1", "success1_r2", "failure1"} {
		for _, st := range []uint8{0, 1} {
			seeds["FuzzHostReceive"] = append(seeds["FuzzHostReceive"], []any{st, g[name]})
		}
	}
	fuzzseed.Sync(t, *update, seeds)
}
