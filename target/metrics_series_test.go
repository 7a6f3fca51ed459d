package target

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// seriesCount counts the time series a scrape of reg exposes, as Prometheus
// stores them: one per counter or gauge, and per histogram one per bucket
// (with +Inf), _sum and _count. It returns the total and the count per
// metric family.
func seriesCount(t testing.TB, reg *prometheus.Registry) (int, map[string]int) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n, per := 0, map[string]int{}
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			c := 1
			if h := m.Histogram; h != nil {
				c = len(h.Bucket) + 3 // buckets, +Inf, _sum, _count
				if len(h.Bucket) > 0 && h.Bucket[len(h.Bucket)-1].GetUpperBound() > 1e300 {
					c-- // +Inf among the buckets already
				}
			}
			per[mf.GetName()] += c
			n += c
		}
	}
	return n, per
}

func fmtSeries(per map[string]int) string {
	var names []string
	for k := range per {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		fmt.Fprintf(&b, "  %-55s %d\n", k, per[k])
	}
	return b.String()
}

// TestMetricsSeriesBudget is issue 23.10: 113 buckets per histogram, about
// 361 series per namespace, 355 for the idle discovery subsystem, about 96k
// per target at the defaults (max_controllers 256). It counts the series of
// a target with one subsystem and one namespace: idle, then with one host
// (an admin and one I/O queue) that reads and writes, and states the
// target's total at the defaults as idle + max_controllers x the series one
// more controller adds (with one I/O queue; each further queue adds about
// 26). Measured before the fix: a histogram 115 series, idle 1091
// (discovery 355), one controller 1322, each further 229, at the defaults
// 59 717. After: 28, 56 (10), 334, 136, 35 014. Bounds: a histogram at
// most 30 series; the idle target at most 150 (the discovery subsystem,
// which never sees I/O, at most 20); a controller at most 150; the default
// target's total under 40 000.
func TestMetricsSeriesBudget(t *testing.T) {
	s := startServer(t, testConfig(t, memNS(1, "4MiB")))
	reg := metricsRegistry(t, s)
	idle, perIdle := seriesCount(t, reg)

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	disc := 0
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetName() == "subsystem" && l.GetValue() == nvmeof.DiscoveryNQN {
					c := 1
					if h := m.Histogram; h != nil {
						c = len(h.Bucket) + 3
					}
					disc += c
				}
			}
		}
	}

	h := mustConnect(t, portAddr(s, 1), testSubNQN)
	h.setup(1)
	buf := make([]byte, 4096)
	for i := range 8 {
		if err := do(t, h.io[0], rw(i%2 == 0, 1, uint64(i), buf, 512)); err != nil {
			t.Fatal(err)
		}
	}
	one, perOne := seriesCount(t, reg)
	// A second controller of the same subsystem: what each further one adds.
	h2, err := connectHost(t, portAddr(s, 1), testSubNQN, "nqn.2014-08.org.nvmexpress:uuid:6e766d65-7464-4c61-9b00-0000000000e2", testKATO)
	if err != nil {
		t.Fatal(err)
	}
	h2.setup(1)
	for i := range 8 {
		if err := do(t, h2.io[0], rw(i%2 == 0, 1, uint64(i), buf, 512)); err != nil {
			t.Fatal(err)
		}
	}
	two, perTwo := seriesCount(t, reg)
	perCtrl := two - one
	maxHist := 0
	if mfs, err = reg.Gather(); err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			if h := m.Histogram; h != nil {
				maxHist = max(maxHist, len(h.Bucket)+3)
			}
		}
	}
	atDefaults := one + (DefaultMetricsMaxControllers-1)*perCtrl
	t.Logf("series: idle target %d (discovery subsystem %d), with one controller %d, each further controller %d; a histogram %d; at the defaults (max_controllers %d) %d",
		idle, disc, one, perCtrl, maxHist, DefaultMetricsMaxControllers, atDefaults)
	if maxHist > 30 || idle > 150 || disc > 20 || perCtrl > 150 || atDefaults > 40000 {
		t.Errorf("over budget (histogram 30, idle 150, discovery 20, controller 150, default target 40000)\nidle:\n%s\none controller:\n%s\ntwo:\n%s",
			fmtSeries(perIdle), fmtSeries(perOne), fmtSeries(perTwo))
	}
}
