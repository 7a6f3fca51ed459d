// Package autoconnect reads the fabrics configuration a Linux host already
// has, nvme-cli's /etc/nvme/discovery.conf and libnvme's
// /etc/nvme/config.json, into the connections they ask for: each an
// nvmeof connect or connect-all command line (Entry), with the
// DH-HMAC-CHAP secrets kept apart (Secrets: passed to the connection,
// never printed), and notes on what nvmeof does not support and drops.
// The command (nvmeof autoconnect) runs the entries.
package autoconnect
