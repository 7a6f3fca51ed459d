package target

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// TestTestHooks: the test hooks see every command and completion; a Fail
// verdict answers at once with its status, a rewritten result reaches the
// host, a held command stays unanswered until its queue ends, and hooks
// cannot be set on a running target.
func TestTestHooks(t *testing.T) {
	cfg := testConfig(t, memNS(1, "1MiB"))
	tg, err := New(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	hold := make(chan HookQueue, 1)
	var rewritten atomic.Bool
	err = tg.SetTestHooks(&TestHooks{
		Command: func(q HookQueue, sqe *nvmeof.SQE) Verdict {
			switch {
			case q.QID() > 0 && sqe.Opcode() == nvmeof.NVMWriteZeroes:
				return Verdict{Action: HookFail, Status: nvmeof.StatusWriteFault | nvmeof.StatusDNR}
			case q.QID() > 0 && sqe.Opcode() == nvmeof.NVMFlush:
				hold <- q
				return Verdict{Action: HookHold}
			}
			return Verdict{}
		},
		Response: func(q HookQueue, sqe *nvmeof.SQE, rsp HookResponse) HookResponse {
			if sqe.IsFabrics() && sqe.FCType() == nvmeof.FCTypePropertyGet && sqe.PropertyGetCmd().Offset() == nvmeof.PropVS && !rewritten.Swap(true) {
				rsp.Result, rsp.SetResult = 0x20000, true // VS 2.0
			}
			return rsp
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = tg.Shutdown(ctx)
	})
	if err := tg.SetTestHooks(nil); err == nil {
		t.Error("hooks set on a running target")
	}
	h := mustConnect(t, cfg.Ports[0].ListenAddress(), testSubNQN)
	if vs, err := h.propGet(nvmeof.PropVS); err != nil || vs != 0x20000 {
		t.Fatalf("VS %#x, %v: want the rewritten 0x20000", vs, err)
	}
	h.enable()
	h.setup(1)
	wz := rw(true, 1, 0, nil, 512)
	wz.SQE.BuildWriteZeroes(1, 0, 8)
	wantStatus(t, "Write Zeroes", do(t, h.io[0], wz), nvmeof.StatusWriteFault|nvmeof.StatusDNR)
	done := make(chan error, 1)
	go func() {
		fl := rw(false, 1, 0, nil, 512)
		fl.SQE.BuildFlush(1)
		done <- do(t, h.io[0], fl)
	}()
	q := <-hold
	select {
	case err := <-done:
		t.Fatalf("held flush answered: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	q.Disconnect()
	if err := <-done; err == nil {
		t.Fatal("held flush succeeded after its queue was closed")
	}
}
