package daemon

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestGatewayRulesMetricsExist: every nvmetd_gateway_* series the alert
// rules (deploy/prometheus/nvmetd-rules.yml) use is one the gateway's
// collector describes, with the labels the rules aggregate by.
func TestGatewayRulesMetricsExist(t *testing.T) {
	b, err := os.ReadFile("../../deploy/prometheus/nvmetd-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan *prometheus.Desc, 32)
	gatewayCollector{}.Describe(ch)
	close(ch)
	described := map[string]string{}
	fq := regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)
	for d := range ch {
		m := fq.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read %s", d)
		}
		described[m[1]] = m[2]
	}
	used := regexp.MustCompile(`nvmetd_gateway_[a-z_]+`).FindAllString(string(b), -1)
	if len(used) == 0 {
		t.Fatal("the rules use no gateway series")
	}
	for _, n := range used {
		labels, ok := described[n]
		if !ok {
			t.Errorf("the rules use %s, which the gateway's collector does not describe", n)
			continue
		}
		// The group-level rules aggregate by group.
		if n != "nvmetd_gateway_degraded" && n != "nvmetd_gateway_fences_total" && !strings.Contains(labels, "group") {
			t.Errorf("%s has labels {%s}: the rules aggregate it by group", n, labels)
		}
	}
}
