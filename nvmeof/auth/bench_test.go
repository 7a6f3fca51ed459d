package auth

import (
	"testing"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// BenchmarkDHExchange measures one Diffie-Hellman exchange of a group as
// both sides of a transaction do it: two key pairs and two shared secrets
// (four constant-time exponentiations with Linux's private key sizes).
func BenchmarkDHExchange(b *testing.B) {
	for _, g := range AllDHGroups[1:] {
		b.Run(g.String(), func(b *testing.B) {
			r := detReader("bench")
			for b.Loop() {
				kh, err := GenerateDHKey(g, r)
				if err != nil {
					b.Fatal(err)
				}
				kc, _ := GenerateDHKey(g, r)
				z1, err1 := kh.SharedSecret(kc.PublicValue())
				z2, err2 := kc.SharedSecret(kh.PublicValue())
				if err1 != nil || err2 != nil || len(z1) != len(z2) {
					b.Fatal(err1, err2)
				}
			}
		})
	}
}

// BenchmarkTransaction measures a whole bidirectional transaction, host and
// controller in one goroutine: what authenticating one queue costs in CPU.
func BenchmarkTransaction(b *testing.B) {
	for _, g := range AllDHGroups {
		b.Run(g.String(), func(b *testing.B) {
			h, _ := NewHost(HostConfig{HostNQN: testHostNQN, SubNQN: testSubNQN, Secret: hostSecret, CtrlSecret: ctrlSecret, Rand: detReader("h")})
			c := mustController(b, ControllerConfig{HostNQN: testHostNQN, SubNQN: testSubNQN, HostSecret: hostSecret, CtrlSecret: ctrlSecret,
				Hash: HashSHA512, DHGroup: g, Rand: detReader("c")})
			var s nvmeof.SQE
			for b.Loop() {
				step := h.Start(1)
				for step.Action != HostDone {
					if step.Action == HostSend {
						s.BuildAuthSend(uint32(len(step.Data)))
						r := c.Send(&s, step.Data)
						step = h.Complete(r.Status, nil)
					} else {
						s.BuildAuthReceive(step.AllocLen)
						r := c.Receive(&s, step.AllocLen)
						step = h.Complete(r.Status, r.Data)
					}
				}
				if step.Err != nil || !c.Authenticated() {
					b.Fatal(step.Err)
				}
			}
		})
	}
}
