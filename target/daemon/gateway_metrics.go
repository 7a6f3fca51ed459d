package daemon

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nvmetd/nvmetd/gateway/gwtarget"
)

// gatewayCollector exports the gateway's ownership to Prometheus.
type gatewayCollector struct{ gs *gwtarget.Gateway }

var (
	gatewayInfoDesc = prometheus.NewDesc("nvmetd_gateway_info",
		"1: this nvmetd is the gateway named gateway of the gateway group named group (the alert rules count a group's gateways by it).",
		[]string{"gateway", "group"}, nil)
	gatewayOwnedDesc = prometheus.NewDesc("nvmetd_gateway_ana_group_owned",
		"1 if this gateway owns the ANA group (optimized here), else 0.", []string{"ana_group", "group"}, nil)
	gatewayFencesDesc = prometheus.NewDesc("nvmetd_gateway_fences_total",
		"Gateways this gateway fenced (blocklisted) before taking their groups.", nil, nil)
	gatewayDegradedDesc = prometheus.NewDesc("nvmetd_gateway_degraded",
		"1 if this gateway takes no ownership (its group configuration differs from the cluster's).", nil, nil)
	gatewayGroupVersionDesc = prometheus.NewDesc("nvmetd_gateway_group_config_version",
		"The version of the group's configuration held in RADOS that this gateway runs (gateway.group_config: rados); "+
			"gateways of one group at different versions are a skew.", []string{"group"}, nil)
	gatewayGroupPendingDesc = prometheus.NewDesc("nvmetd_gateway_group_config_pending",
		"1 if a newer stored version of the group's configuration could not be applied here (status: group_config_pending).", []string{"group"}, nil)
	gatewayDrainedDesc = prometheus.NewDesc("nvmetd_gateway_drained",
		"1 if this gateway is drained (nvmetctl gateway drain): it hands its ANA groups to the others and owns none until undrained.", []string{"group"}, nil)
)

func (c gatewayCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- gatewayInfoDesc
	ch <- gatewayOwnedDesc
	ch <- gatewayFencesDesc
	ch <- gatewayDegradedDesc
	ch <- gatewayGroupVersionDesc
	ch <- gatewayGroupPendingDesc
	ch <- gatewayDrainedDesc
}

func (c gatewayCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.gs.Status()
	if st == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(gatewayInfoDesc, prometheus.GaugeValue, 1, st.Name, st.Group)
	for _, g := range st.Groups {
		v := 0.0
		if g.Owned {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(gatewayOwnedDesc, prometheus.GaugeValue, v, fmt.Sprint(g.ID), st.Group)
	}
	ch <- prometheus.MustNewConstMetric(gatewayFencesDesc, prometheus.CounterValue, float64(st.Fences))
	deg := 0.0
	if st.Degraded != "" {
		deg = 1
	}
	ch <- prometheus.MustNewConstMetric(gatewayDegradedDesc, prometheus.GaugeValue, deg)
	if c.gs.RADOSHeld() {
		ch <- prometheus.MustNewConstMetric(gatewayGroupVersionDesc, prometheus.GaugeValue, float64(st.GroupConfigVersion), st.Group)
		pending := 0.0
		if st.GroupConfigPending != "" {
			pending = 1
		}
		ch <- prometheus.MustNewConstMetric(gatewayGroupPendingDesc, prometheus.GaugeValue, pending, st.Group)
		drained := 0.0
		if st.Drained {
			drained = 1
		}
		ch <- prometheus.MustNewConstMetric(gatewayDrainedDesc, prometheus.GaugeValue, drained, st.Group)
	}
}
