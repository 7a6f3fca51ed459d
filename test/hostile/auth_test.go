package hostile

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/internal/testing/rawpeer"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/auth"
)

// victimNQN is the host whose key the daemon has (ffdhe8192) and whose NQN
// the attackers forge.
const victimNQN = "nqn.2014-08.org.nvmexpress:uuid:1e917000-0000-4000-8000-0000000000a1"

// authSend runs an Authentication Send of msg on q (data fetched by RDMA
// Read, as Linux sends it).
func authSend(q *rawpeer.Queue, msg []byte, dl time.Time) error {
	r := q.Register(append([]byte(nil), msg...), true, false)
	var sqe nvmeof.SQE
	sqe.BuildAuthSend(uint32(len(msg)))
	sqe.SGL1().SetKeyed(r.TO, uint32(len(msg)), r.STag, false)
	cqe, err := q.Do(&sqe, nil, dl)
	if err == nil && cqe.Status() != nvmeof.StatusSuccess {
		err = &rawpeer.StatusError{What: "Authentication Send", CQE: cqe}
	}
	return err
}

// authReceive runs an Authentication Receive of 4 KiB on q.
func authReceive(q *rawpeer.Queue, dl time.Time) ([]byte, error) {
	r := q.Register(make([]byte, auth.ReceiveBufferSize), false, true)
	var sqe nvmeof.SQE
	sqe.BuildAuthReceive(auth.ReceiveBufferSize)
	sqe.SGL1().SetKeyed(r.TO, auth.ReceiveBufferSize, r.STag, false)
	cqe, err := q.Do(&sqe, nil, dl)
	if err == nil && cqe.Status() != nvmeof.StatusSuccess {
		err = &rawpeer.StatusError{What: "Authentication Receive", CQE: cqe}
	}
	return r.Buf, err
}

// wrongGuess is one DH-HMAC-CHAP transaction of a peer without the key:
// AUTH_Negotiate (ffdhe8192 only), the challenge (the daemon makes an
// 8192-bit key pair), a Reply with a random response and a random valid
// DH value (the daemon computes the shared secret). It costs the peer
// nothing but bytes.
func wrongGuess(q *rawpeer.Queue, tid uint16, dl time.Time) error {
	neg := auth.AppendNegotiate(nil, auth.NewNegotiate(tid, []auth.Hash{auth.HashSHA256}, []auth.DHGroup{auth.FFDHE8192}))
	if err := authSend(q, neg, dl); err != nil {
		return err
	}
	data, err := authReceive(q, dl)
	if err != nil {
		return err
	}
	ch, err := auth.ParseChallenge(data)
	if err != nil {
		return fmt.Errorf("challenge: %w", err)
	}
	m := &auth.Reply{TID: ch.TID, R: make([]byte, len(ch.C)), DHValue: make([]byte, ch.DHGroup.Size())}
	_, _ = rand.Read(m.R)
	_, _ = rand.Read(m.DHValue)
	m.DHValue[0] = 0x7f
	return authSend(q, auth.AppendReply(nil, m), dl)
}

// cpuTicks is the user plus system time of process pid, in clock ticks
// (/proc/PID/stat fields 14 and 15).
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // from field 3 on
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	k, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return u + k, nil
}

// clockTick is USER_HZ, the unit of /proc/PID/stat's times (100 on every
// Linux architecture Go supports).
const clockTick = 10 * time.Millisecond

// TestAuthGuessFlood is issue 22's acceptance for unauthenticated peers: N
// = 3 × max_controllers_per_host raw peers forge the NQN of a host whose
// key is ffdhe8192 and loop AUTH_Negotiate and wrong Replies (costly for
// the daemon, free for them). Each of their controllers ends at its first
// failure (before: they kept them for ever and the real host got
// Controller Busy as long as they ran); the real host, with its key,
// connects and authenticates while they run, within its authentication
// timeout (10 s) and a generous margin. The daemon's CPU time during the
// attack is measured from /proc/PID/stat and logged with its bound: at
// most max(1, GOMAXPROCS/2) Diffie-Hellman exponentiations run at once.
func TestAuthGuessFlood(t *testing.T) {
	t.Parallel()
	const maxCtrls = 2
	const attackers = 3 * maxCtrls
	key, err := auth.GenerateKey(auth.KeyOptions{HMAC: 1, NQN: victimNQN}, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, config{
		Limits: []string{"max_controllers_per_host: " + strconv.Itoa(maxCtrls)},
		Hosts:  []string{fmt.Sprintf("{nqn: %q, dhchap_key: %q, dhchap_dhgroup: ffdhe8192}", victimNQN, key)},
	})
	var (
		mu                      sync.Mutex
		ctrls, replies, refused int
		stopping                = make(chan struct{})
		wg                      sync.WaitGroup
	)
	for i := range attackers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for tid := uint16(1); ; tid++ {
				select {
				case <-stopping:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), guard(time.Second))
				h, err := rawpeer.ConnectHost(ctx, d.addr, subNQN, victimNQN, hostID(100+i), 5000, rawpeer.Options{})
				cancel()
				if err != nil {
					mu.Lock()
					refused++
					mu.Unlock()
					continue
				}
				mu.Lock()
				ctrls++
				mu.Unlock()
				for {
					if wrongGuess(h.Admin, tid, deadline(guard(time.Second))) != nil {
						break
					}
					mu.Lock()
					replies++
					mu.Unlock()
				}
				h.Close()
			}
		}()
	}
	stopAttack := sync.OnceFunc(func() {
		close(stopping)
		wg.Wait()
	})
	defer stopAttack()

	// Five seconds of attack alone: the daemon's CPU for it.
	cpu0, err := cpuTicks(d.pid)
	if err != nil {
		t.Fatal(err)
	}
	wall0 := time.Now()
	time.Sleep(5 * time.Second)
	cpu1, _ := cpuTicks(d.pid)
	wall := time.Since(wall0)
	cpu := time.Duration(cpu1-cpu0) * clockTick

	// The real host, while the attack goes on.
	sec, err := auth.ParseSecret(key)
	if err != nil {
		t.Fatal(err)
	}
	cfg := d.legitConfig()
	cfg.HostNQN, cfg.DHCHAPSecret, cfg.KeepAliveTimeout = victimNQN, sec, 10*time.Second
	start := time.Now()
	limit := start.Add(10*time.Second + guard(time.Second))
	tries := 0
	for {
		tries++
		ctx, cancel := context.WithTimeout(context.Background(), guard(time.Second))
		c, err := initiator.Connect(ctx, cfg)
		if err == nil {
			_, err = c.Namespace(1).ReadAtContext(ctx, make([]byte, 4096), 0)
			c.Close(ctx)
			cancel()
			if err != nil {
				t.Fatalf("the real host's read: %v", err)
			}
			break
		}
		cancel()
		if time.Now().After(limit) {
			t.Fatalf("the real host was kept out for %v (%d tries): %v", time.Since(start), tries, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	in := time.Since(start)
	stopAttack()
	mu.Lock()
	t.Logf("real host in after %v (%d tries); attackers: %d controllers, %d wrong Replies, %d Connects refused; "+
		"daemon CPU during 5 s of attack alone: %v in %v (%.2f of one CPU)",
		in.Round(time.Millisecond), tries, ctrls, replies, refused, cpu, wall.Round(time.Millisecond), cpu.Seconds()/wall.Seconds())
	if replies > ctrls {
		t.Errorf("%d wrong Replies on %d controllers: a controller outlived its first failure", replies, ctrls)
	}
	mu.Unlock()
	d.healthy(t, "after the guess flood")
}
