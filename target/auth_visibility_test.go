package target

import (
	"bytes"
	"slices"
	"testing"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// TestNamespaceVisibility: a namespace limited to a host is absent for
// the other hosts of the subsystem (active namespace lists, Identify
// Namespace, the ANA log) and cannot be addressed by them (Invalid
// Namespace), while its host sees and uses it; a reload changes who sees
// it.
func TestNamespaceVisibility(t *testing.T) {
	cfg := testConfig(t, memNS(1, "1MiB"), memNS(2, "1MiB"), memNS(3, "1MiB"))
	cfg.Subsystems[0].Namespaces[0].Hosts = []string{testHostNQN}
	cfg.Subsystems[0].Namespaces[2].Hosts = []string{otherHost, testHostNQN}
	s := startServer(t, cfg)
	addr := portAddr(s, 1)

	check := func(hostnqn string, want []uint32) {
		t.Helper()
		h, err := connectHost(t, addr, testSubNQN, hostnqn, testKATO)
		if err != nil {
			t.Fatal(err)
		}
		defer h.close()
		h.setup(1)
		b, err := h.identify(nvmeof.CNSActiveNSList, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := nvmeof.ParseNSList(b, nil)
		if !slices.Equal(got, want) {
			t.Fatalf("%s: active namespaces %v, want %v", hostnqn, got, want)
		}
		for nsid := uint32(1); nsid <= 3; nsid++ {
			visible := slices.Contains(want, nsid)
			b, err := h.identify(nvmeof.CNSNamespace, nsid, 0)
			if err != nil {
				t.Fatal(err)
			}
			if zero := bytes.Count(b, []byte{0}) == len(b); zero == visible {
				t.Errorf("%s: Identify Namespace %d all zeroes: %v", hostnqn, nsid, zero)
			}
			_, err = h.identify(nvmeof.CNSNSDescList, nsid, 0)
			err2 := do(t, h.io[0], rw(false, nsid, 0, make([]byte, 512), 512))
			if visible {
				if err != nil || err2 != nil {
					t.Errorf("%s: namespace %d: %v, %v", hostnqn, nsid, err, err2)
				}
				continue
			}
			wantStatus(t, "descriptors of a hidden namespace", err, nvmeof.StatusInvalidNamespace|nvmeof.StatusDNR)
			wantStatus(t, "read of a hidden namespace", err2, nvmeof.StatusInvalidNamespace|nvmeof.StatusDNR)
		}
		b, err = h.getLog(nvmeof.LIDANA, 0, 0, 4096)
		if err != nil {
			t.Fatal(err)
		}
		ana, err := nvmeof.ParseANALog(b)
		if err != nil {
			t.Fatal(err)
		}
		var listed []uint32
		for _, g := range ana.Groups {
			listed = append(listed, g.NSIDs...)
		}
		slices.Sort(listed)
		if !slices.Equal(listed, want) {
			t.Errorf("%s: the ANA log lists namespaces %v, want %v", hostnqn, listed, want)
		}
	}
	check(testHostNQN, []uint32{1, 2, 3})
	check(otherHost, []uint32{2, 3})
	check("nqn.2014-08.org.nvmexpress:uuid:77777777-2222-3333-4444-555555555555", []uint32{2})

	// A reload gives namespace 1 to every host.
	cfg.Subsystems[0].Namespaces[0].Hosts = nil
	if err := tryReload(t, s, cfg); err != nil {
		t.Fatal(err)
	}
	check(otherHost, []uint32{1, 2, 3})
}
