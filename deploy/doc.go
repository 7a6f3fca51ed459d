// Package deploy holds what installs nvmetd on a host: the systemd unit
// (nvmetd.service) and the install script (install.sh), and what watches
// it: a Grafana dashboard (grafana/nvmetd-dashboard.json) and Prometheus
// alert rules (prometheus/nvmetd-rules.yml) on the metrics endpoint. It has
// no Go code; its tests install into a temporary DESTDIR and verify the
// unit with systemd-analyze, and check that every metric the dashboard and
// the rules use is in a real scrape.
package deploy
