// Package deploy holds what installs nvmetd on a host: the systemd unit
// (nvmetd.service) and the install script (install.sh). It has no Go code;
// its tests install into a temporary DESTDIR and verify the unit with
// systemd-analyze.
package deploy
