package daemon

import (
	"fmt"
	"reflect"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/internal/metricserve"
	"github.com/nvmetd/nvmetd/target"
)

// metricsSource is what a target offers the metrics endpoint
// (*target.Target implements it; the daemon tests' fake does not).
type metricsSource interface {
	MetricsCollector(maxControllers int) prometheus.Collector
}

// startMetrics serves the configured metrics endpoint (none when the
// section is off).
func (d *daemon) startMetrics(mc target.MetricsConfig) (*metricserve.Server, error) {
	if !mc.Enabled() {
		return nil, nil
	}
	src, ok := d.t.(metricsSource)
	if !ok {
		return nil, fmt.Errorf("metrics: the target has no collector")
	}
	cs := []prometheus.Collector{src.MetricsCollector(mc.MaxControllers), reloadCollector{d}}
	if d.gw != nil {
		cs = append(cs, gatewayCollector{d.gw})
	}
	reg, err := metricserve.NewRegistry("nvmetd", programVersion(), cs...)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	cfg := metricserve.Config{Address: mc.Address, Socket: mc.Socket, Path: mc.Path, TLSCert: mc.TLSCert, TLSKey: mc.TLSKey, User: mc.BasicAuthUser}
	if mc.BasicAuthPasswordFile != "" {
		if cfg.Password, err = metricserve.ReadPasswordFile(mc.BasicAuthPasswordFile); err != nil {
			return nil, fmt.Errorf("metrics.basic_auth_password_file: %w", err)
		}
	}
	s, err := metricserve.Start(cfg, reg, d.log.Named("metrics"))
	if err != nil {
		return nil, err
	}
	if cfg.User == "" && cfg.Address != "" {
		d.log.Info("metrics endpoint serving (no authentication: restrict the address or add basic_auth_user)", zap.Stringer("address", s.Addr()), zap.String("path", mc.Path), zap.Bool("tls", cfg.TLSCert != ""))
	} else {
		d.log.Info("metrics endpoint serving", zap.Stringer("address", s.Addr()), zap.String("path", mc.Path), zap.Bool("tls", cfg.TLSCert != ""))
	}
	return s, nil
}

// reloadMetrics restarts the endpoint when its section changed; if the new
// one cannot start, the old one keeps serving.
func (d *daemon) reloadMetrics(old, nw target.MetricsConfig) {
	if reflect.DeepEqual(old, nw) {
		return
	}
	d.metricsMu.Lock()
	defer d.metricsMu.Unlock()
	if d.metrics != nil && nw.Enabled() && (old.Address == nw.Address && old.Socket == nw.Socket) {
		// Same listener: free it first.
		d.metrics.Close()
		d.metrics = nil
	}
	s, err := d.startMetrics(nw)
	if err != nil {
		if d.metrics != nil {
			d.log.Error("reload: the metrics endpoint could not start; the previous one keeps serving", zap.Error(err))
		} else {
			d.log.Error("reload: the metrics endpoint could not start", zap.Error(err))
		}
		return
	}
	if d.metrics != nil {
		d.metrics.Close()
	}
	d.metrics = s
	if s == nil {
		d.log.Info("reload: metrics endpoint off")
	}
}

// stopMetrics closes the endpoint.
func (d *daemon) stopMetrics() {
	d.metricsMu.Lock()
	defer d.metricsMu.Unlock()
	if d.metrics != nil {
		d.metrics.Close()
		d.metrics = nil
	}
}
