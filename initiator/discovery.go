package initiator

import (
	"context"
	"errors"
	"fmt"
	"net"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// MaxDiscoveryRecords bounds NUMREC: a discovery log claiming more entries
// is refused rather than read (4 MiB of entries).
const MaxDiscoveryRecords = 4096

// ErrDiscoveryChanging means the discovery log kept changing (GENCTR
// differed between the first and the last header read) through every
// retry (libnvme: EAGAIN), or NUMREC changed with GENCTR unchanged
// (EBADSLT).
var ErrDiscoveryChanging = errors.New("initiator: discovery log changed while it was read")

// logChunk is NVME_LOG_PAGE_PDU_SIZE: libnvme reads logs in commands of at
// most 4 KiB.
const logChunk = 4096

// DiscoveryLog reads the discovery log page of a discovery controller the
// way libnvme's nvme_discovery_log does: the 1024-byte header (RAE set),
// then if NUMREC > 0 the entries from offset 1024 in Get Log Page commands
// of at most 4 KiB at increasing offsets (RAE set), then the header again
// (RAE clear, which re-arms the discovery change event); if GENCTR changed
// meanwhile it starts over, up to DefaultDiscoveryRetries times.
func (c *Controller) DiscoveryLog(ctx context.Context) (*nvmeof.DiscoveryLog, error) {
	hdr := make([]byte, nvmeof.DiscoveryLogHeaderSize)
	var entries []byte
	for try := 0; ; try++ {
		if err := c.readLog(ctx, nvmeof.LIDDiscovery, 0, hdr, true); err != nil {
			return nil, err
		}
		genctr, numrec, err := nvmeof.ParseDiscoveryLogHeader(hdr)
		if err != nil {
			return nil, fmt.Errorf("initiator: discovery log: %w", err)
		}
		if numrec == 0 {
			return &nvmeof.DiscoveryLog{GenCtr: genctr}, nil
		}
		if numrec > MaxDiscoveryRecords {
			return nil, fmt.Errorf("initiator: discovery log claims %d records (limit %d)", numrec, MaxDiscoveryRecords)
		}
		c.log.Debug("get discovery log records", zap.Uint64("numrec", numrec), zap.Uint64("genctr", genctr))
		entries = make([]byte, int(numrec)*nvmeof.DiscoveryLogEntrySize)
		if err := c.readLog(ctx, nvmeof.LIDDiscovery, nvmeof.DiscoveryLogEntryOffset(0), entries, true); err != nil {
			return nil, err
		}
		// "If the log page was read with multiple Get Log Page commands,
		// genctr must be checked afterwards to ensure atomicity."
		if err := c.readLog(ctx, nvmeof.LIDDiscovery, 0, hdr, false); err != nil {
			return nil, err
		}
		genctr2, numrec2, err := nvmeof.ParseDiscoveryLogHeader(hdr)
		if err != nil {
			return nil, fmt.Errorf("initiator: discovery log: %w", err)
		}
		if genctr2 != genctr {
			if try+1 < DefaultDiscoveryRetries {
				continue
			}
			return nil, fmt.Errorf("%w: GENCTR %d then %d after %d tries", ErrDiscoveryChanging, genctr, genctr2, try+1)
		}
		if numrec2 != numrec {
			return nil, fmt.Errorf("%w: NUMREC changed from %d to %d", ErrDiscoveryChanging, numrec, numrec2)
		}
		l := &nvmeof.DiscoveryLog{GenCtr: genctr, NumRec: numrec}
		if l.Entries, err = nvmeof.ParseDiscoveryLogEntries(entries, nil); err != nil {
			return nil, fmt.Errorf("initiator: discovery log: %w", err)
		}
		return l, nil
	}
}

// readLog reads len(buf) bytes of a log from lpo in commands of at most
// 4 KiB (libnvme nvme_get_log_page): RAE is set on every command but the
// last, which carries rae.
func (c *Controller) readLog(ctx context.Context, lid uint8, lpo uint64, buf []byte, rae bool) error {
	for off := 0; off < len(buf); {
		n := min(len(buf)-off, logChunk)
		last := off+n == len(buf)
		if err := c.GetLogPage(ctx, lid, 0, lpo+uint64(off), !last || rae, buf[off:off+n]); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// Discover connects to the discovery controller at cfg.Address (SubNQN
// defaults to the discovery NQN, KATO to 0 as nvme discover), reads its
// log and disconnects.
func Discover(ctx context.Context, cfg Config) (*nvmeof.DiscoveryLog, error) {
	if cfg.SubNQN == "" {
		cfg.SubNQN = nvmeof.DiscoveryNQN
	}
	c, err := Connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	l, err := c.DiscoveryLog(ctx)
	if cerr := c.Close(ctx); err == nil && cerr != nil {
		c.log.Warn("discovery controller shutdown", zap.Error(cerr))
	}
	return l, err
}

// DiscoveryResult is the log of one discovery controller.
type DiscoveryResult struct {
	// Address is the discovery controller's host:port.
	Address string
	// Log is its discovery log (nil if Err).
	Log *nvmeof.DiscoveryLog
	// Err is why it could not be read.
	Err error
	// Depth is 0 for the first controller, 1 for its referrals, ...
	Depth int
}

// DiscoverReferrals is Discover that also follows referrals (entries of
// SUBTYPE 1, other discovery controllers), breadth first, up to maxDepth
// levels, visiting each address once. The first controller's error is
// returned; referrals that fail are reported in their result.
func DiscoverReferrals(ctx context.Context, cfg Config, maxDepth int) ([]DiscoveryResult, error) {
	seen := map[string]bool{cfg.Address: true}
	queue := []DiscoveryResult{{Address: cfg.Address}}
	var out []DiscoveryResult
	for len(queue) > 0 {
		r := queue[0]
		queue = queue[1:]
		rc := cfg
		rc.Address = r.Address
		rc.SubNQN = ""
		r.Log, r.Err = Discover(ctx, rc)
		if r.Err != nil && r.Depth == 0 {
			return nil, r.Err
		}
		out = append(out, r)
		if r.Log == nil || r.Depth >= maxDepth {
			continue
		}
		for _, e := range r.Log.Entries {
			if e.SubType != nvmeof.SubTypeReferral || e.TrType != nvmeof.TrTypeRDMA {
				continue
			}
			addr := net.JoinHostPort(e.TrAddr, e.TrSvcID)
			if seen[addr] {
				continue
			}
			seen[addr] = true
			queue = append(queue, DiscoveryResult{Address: addr, Depth: r.Depth + 1})
		}
	}
	return out, nil
}
