#!/usr/bin/env python3
"""An independent reference of Linux's DH-HMAC-CHAP, for the tests of package auth.

Written from the Linux sources, not from the Go code: include/linux/nvme.h
(struct nvmf_auth_dhchap_*), drivers/nvme/common/auth.c (transform_key,
augmented_challenge, generate_psk, generate_digest), drivers/nvme/host/auth.c
(the host: nvme_queue_auth_work and helpers), drivers/nvme/target/auth.c and
fabrics-cmd-auth.c (the controller), crypto/dh.c (private keys), with Python's
hashlib/hmac, pow() and zlib.crc32, and the RFC 7919 primes as OpenSSL 3 has
them (testdata/ffdhe*.hex, from `openssl genpkey -genparam -algorithm DH
-pkeyopt group:ffdheN`).

  linuxref.py vectors            print the golden vectors (testdata/vectors.json)
  linuxref.py host   < config    act as a Linux host over JSON lines
  linuxref.py ctrl   < config    act as nvmet (one queue) over JSON lines

In the peer modes each session starts with a line of JSON configuration; then:
  host: it prints {"op":"send","data":HEX} or {"op":"recv","al":N} and reads
        {"status":N[,"data":HEX]}; finally it prints {"op":"done","error":E}.
  ctrl: it reads {"op":"send","data":HEX} / {"op":"recv","al":N} /
        {"op":"state"} and answers {"status":N,"data":HEX,"fatal":B,
        "authenticated":B}; {"op":"end"} ends the session.
"""
import base64
import hashlib
import hmac
import json
import os
import random
import struct
import sys
import zlib

HASH = {1: hashlib.sha256, 2: hashlib.sha384, 3: hashlib.sha512}
HLEN = {1: 32, 2: 48, 3: 64}
GROUP_BITS = {1: 2048, 2: 3072, 3: 4096, 4: 6144, 5: 8192}
# crypto/dh.c: N = roundup_pow_of_two(2 * max_strength)
PRIV_BITS = {1: 256, 2: 256, 3: 512, 4: 512, 5: 512}
HERE = os.path.dirname(os.path.abspath(__file__))


def prime(g):
    with open(os.path.join(HERE, "ffdhe%d.hex" % GROUP_BITS[g])) as f:
        return int(f.read().strip(), 16)


def gsize(g):
    return GROUP_BITS[g] // 8


# --- drivers/nvme/common/auth.c -------------------------------------------

def transform(hh, key, nqn):
    if hh == 0:
        return key
    return hmac.new(key, nqn + b"NVMe-over-Fabrics", HASH[hh]).digest()


def augmented(h, z, c):
    return hmac.new(HASH[h](z).digest(), c, HASH[h]).digest()


def response(h, key, c, seq, tid, role, n1, n2):
    return hmac.new(key, c + struct.pack("<IH", seq, tid) + b"\0" + role + n1 + b"\0" + n2, HASH[h]).digest()


def host_response(h, key, c, seq, tid, hostnqn, subnqn):
    return response(h, key, c, seq, tid, b"HostHost", hostnqn, subnqn)


def ctrl_response(h, key, c, seq, tid, subnqn, hostnqn):
    return response(h, key, c, seq, tid, b"Controller", subnqn, hostnqn)


def gen_psk(h, z, c1, c2):
    return hmac.new(z, c1 + c2, HASH[h]).digest()


def psk_digest(h, psk, subnqn, hostnqn):
    d = hmac.new(psk, hostnqn + b" " + subnqn + b" NVMe-over-Fabrics", HASH[h]).digest()
    return base64.b64encode(d).decode()


def encode_secret(hh, key):
    return "DHHC-1:%02x:%s:" % (hh, base64.b64encode(key + struct.pack("<I", zlib.crc32(key))).decode())


def parse_secret(s):
    assert s.startswith("DHHC-1:")
    hh = int(s[7:9])
    raw = base64.b64decode(s[10:].rstrip(":"))
    key, crc = raw[:-4], struct.unpack("<I", raw[-4:])[0]
    assert zlib.crc32(key) == crc
    return hh, key


# --- crypto/dh.c -------------------------------------------------------------

def gen_private(g, rnd):
    """dh_safe_prime_gen_privkey: N+64 random bits mod (2^N - 1), plus 1."""
    n = PRIV_BITS[g]
    r = int.from_bytes(rnd, "big")
    return r % (2 ** n - 1) + 1


def public(g, x):
    return pow(2, x, prime(g)).to_bytes(gsize(g), "big")


def shared(g, x, y):
    p = prime(g)
    yi = int.from_bytes(y, "big")
    if yi < 2 or yi >= p - 1:
        raise ValueError("public value out of range")
    return pow(yi, x, p).to_bytes(gsize(g), "big")


# --- include/linux/nvme.h message layouts ---------------------------------

def negotiate(tid, hashes=(1, 2, 3), groups=(0, 1, 2, 3, 4, 5)):
    d = bytes([1, 0, len(hashes), len(groups)]) + bytes(hashes).ljust(30, b"\0") + bytes(groups).ljust(30, b"\0")
    return struct.pack("<BBHHBB", 0, 0, 0, tid, 0, 1) + d


def challenge(tid, h, g, seq, c, dhv):
    return struct.pack("<BBHHBBBBHI", 1, 1, 0, tid, len(c), 0, h, g, len(dhv), seq) + c + dhv


def reply(tid, r, cvalid, seq, c2, dhv):
    return struct.pack("<BBHHBBBBHI", 1, 2, 0, tid, len(r), 0, cvalid, 0, len(dhv), seq) + r + c2 + dhv


def success1(tid, hl, rval):
    return struct.pack("<BBHHBBB7x", 1, 3, 0, tid, hl, 0, 1 if rval else 0) + (rval or b"")


def success2(tid):
    return struct.pack("<BBHH10x", 1, 4, 0, tid)


def failure(msgid, tid, expl):
    return struct.pack("<BBHHBB", 0, msgid, 0, tid, 1, expl)


# --- golden vectors -----------------------------------------------------------

def det(label, n):
    """Deterministic test bytes: SHA-512 in counter mode over a label."""
    out = b""
    i = 0
    while len(out) < n:
        out += hashlib.sha512(b"%s/%d" % (label.encode(), i)).digest()
        i += 1
    return out[:n]


def vectors():
    hostnqn = b"nqn.2014-08.org.nvmexpress:uuid:6e766d65-6f66-4c61-9b00-000000000001"
    subnqn = b"nqn.2024-01.io.nvmeof-lab:kernel-target"
    v = {"hostnqn": hostnqn.decode(), "subnqn": subnqn.decode(), "secrets": [], "transforms": [],
         "responses": [], "dh": [], "privkeys": [], "psk": [], "messages": {}}
    for hh in range(4):
        for n in (32, 48, 64):
            if hh and n != HLEN[hh]:
                continue
            key = det("secret%d/%d" % (hh, n), n)
            v["secrets"].append({"hash": hh, "key": key.hex(), "encoded": encode_secret(hh, key)})
    for hh in range(4):
        key = det("transform%d" % hh, HLEN.get(hh, 48))
        v["transforms"].append({"hash": hh, "key": key.hex(), "nqn": hostnqn.decode(),
                                "out": transform(hh, key, hostnqn).hex()})
    for h in (1, 2, 3):
        kh = transform(h, det("hostkey%d" % h, HLEN[h]), hostnqn)
        kc = transform(h, det("ctrlkey%d" % h, HLEN[h]), subnqn)
        c1, c2 = det("c1/%d" % h, HLEN[h]), det("c2/%d" % h, HLEN[h])
        seq1, seq2, tid = 0x12345678 + h, 0x9ABCDEF0 + h, 0x100 + h
        v["responses"].append({"hash": h, "kh": kh.hex(), "kc": kc.hex(), "c1": c1.hex(), "c2": c2.hex(),
                               "seq1": seq1, "seq2": seq2, "tid": tid,
                               "r1": host_response(h, kh, c1, seq1, tid, hostnqn, subnqn).hex(),
                               "r2": ctrl_response(h, kc, c2, seq2, tid, subnqn, hostnqn).hex()})
    for g in GROUP_BITS:
        rh, rc = det("xh%d" % g, PRIV_BITS[g] // 8 + 8), det("xc%d" % g, PRIV_BITS[g] // 8 + 8)
        xh, xc = gen_private(g, rh), gen_private(g, rc)
        v["privkeys"].append({"group": g, "random": rh.hex(), "x": xh.to_bytes(PRIV_BITS[g] // 8, "big").hex()})
        yh, yc = public(g, xh), public(g, xc)
        z = shared(g, xh, yc)
        assert z == shared(g, xc, yh)
        e = {"group": g, "xh": xh.to_bytes(PRIV_BITS[g] // 8, "big").hex(),
             "xc": xc.to_bytes(PRIV_BITS[g] // 8, "big").hex(), "yh": yh.hex(), "yc": yc.hex(), "z": z.hex(),
             "aug": {}}
        for h in (1, 2, 3):
            c = det("c1/%d" % h, HLEN[h])
            e["aug"][str(h)] = augmented(h, z, c).hex()
        v["dh"].append(e)
    for h in (1, 2, 3):
        z, c1, c2 = det("z", 256), det("c1/%d" % h, HLEN[h]), det("c2/%d" % h, HLEN[h])
        psk = gen_psk(h, z, c1, c2)
        d = {"hash": h, "z": z.hex(), "c1": c1.hex(), "c2": c2.hex(), "psk": psk.hex()}
        if h in (1, 2):
            d["digest"] = psk_digest(h, psk, subnqn, hostnqn)
        v["psk"].append(d)
    m = v["messages"]
    m["negotiate"] = negotiate(7).hex()
    m["challenge_null"] = challenge(7, 1, 0, 0x01020304, det("c1/1", 32), b"").hex()
    m["challenge_2048"] = challenge(7, 2, 1, 0x01020304, det("c1/2", 48), public(1, 5)).hex()
    m["reply_uni"] = reply(7, det("r1", 32), 0, 0, bytes(32), b"").hex()
    m["reply_bi_2048"] = reply(7, det("r1", 48), 1, 0xA0B0C0D0, det("c2/2", 48), public(1, 7)).hex()
    m["success1"] = success1(7, 32, None).hex()
    m["success1_r2"] = success1(7, 64, det("r2", 64)).hex()
    m["success2"] = success2(7).hex()
    m["failure1"] = failure(0xF1, 7, 1).hex()
    m["failure2"] = failure(0xF0, 7, 6).hex()
    return v


# --- peers over JSON lines ------------------------------------------------------

def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def inp():
    line = sys.stdin.readline()
    if not line:
        sys.exit(0)
    return json.loads(line)


def run_host(cfg):
    """nvme_queue_auth_work, with nvme_auth_receive_validate and friends."""
    rng = random.Random(cfg["seed"])
    hostnqn, subnqn = cfg["hostnqn"].encode(), cfg["subnqn"].encode()
    hh, hkey = parse_secret(cfg["hostkey"])
    kh = transform(hh, hkey, hostnqn)
    kc = None
    if cfg.get("ctrlkey"):
        ch, ckey = parse_secret(cfg["ctrlkey"])
        kc = transform(ch, ckey, subnqn)
    tid = cfg["tid"]

    def cmd(op, **kw):
        out(dict(op=op, **kw))
        return inp()

    def fail2(status, why):
        cmd("send", data=failure(0xF0, tid, status).hex())
        out({"op": "done", "error": why})

    if cmd("send", data=negotiate(tid).hex())["status"]:
        return out({"op": "done", "error": "negotiate failed"})
    r = cmd("recv", al=4096)
    if r["status"]:
        return out({"op": "done", "error": "receive challenge failed"})
    d = bytes.fromhex(r["data"])
    if d[0] == 0 and d[1] == 0xF1:
        return out({"op": "done", "error": "failure1 %d" % d[7]})
    if d[0] != 1 or d[1] != 1 or struct.unpack_from("<H", d, 4)[0] != tid:
        return out({"op": "done", "error": "invalid message"})
    _, _, _, _, hl, _, hashid, dhgid, dhvlen, s1 = struct.unpack_from("<BBHHBBBBHI", d)
    if hashid not in HASH or hl != HLEN[hashid]:
        return fail2(4, "hash unusable")
    c1, dhv = d[16:16 + hl], d[16 + hl:16 + hl + dhvlen]
    z = None
    hostpub = b""
    if dhgid:
        if dhgid not in GROUP_BITS or not dhvlen:
            return fail2(5, "dhgroup unusable")
        x = gen_private(dhgid, rng.randbytes(PRIV_BITS[dhgid] // 8 + 8))
        hostpub = public(dhgid, x)
        try:
            z = shared(dhgid, x, dhv)
        except ValueError:
            return fail2(6, "bad DH value")
    elif dhvlen:
        return fail2(6, "DH value for null group")
    chal = augmented(hashid, z, c1) if z else c1
    r1 = host_response(hashid, kh, chal, s1, tid, hostnqn, subnqn)
    if kc:
        c2, s2, cvalid = rng.randbytes(hl), rng.randrange(1, 1 << 32), 1
    else:
        c2, s2, cvalid = bytes(hl), 0, 0
    if cmd("send", data=reply(tid, r1, cvalid, s2, c2, hostpub).hex())["status"]:
        return fail2(1, "reply failed")
    r = cmd("recv", al=4096)
    if r["status"]:
        return out({"op": "done", "error": "receive success1 failed"})
    d = bytes.fromhex(r["data"])
    if d[0] == 0 and d[1] == 0xF1:
        return out({"op": "done", "error": "failure1 %d" % d[7]})
    if d[0] != 1 or d[1] != 3 or struct.unpack_from("<H", d, 4)[0] != tid:
        return out({"op": "done", "error": "invalid message"})
    if d[6] != hl:
        return fail2(4, "hash length")
    if s2:
        if not d[8]:
            return fail2(1, "no controller response")
        chal2 = augmented(hashid, z, c2) if z else c2
        if not hmac.compare_digest(d[16:16 + hl], ctrl_response(hashid, kc, chal2, s2, tid, subnqn, hostnqn)):
            return fail2(1, "controller authentication failed")
        if cmd("send", data=success2(tid).hex())["status"]:
            return out({"op": "done", "error": "success2 failed"})
    out({"op": "done", "error": ""})


def run_ctrl(cfg):
    """nvmet_execute_auth_send/_receive for one queue (no concatenation)."""
    rng = random.Random(cfg["seed"])
    hostnqn, subnqn = cfg["hostnqn"].encode(), cfg["subnqn"].encode()
    hh, hkey = parse_secret(cfg["hostkey"])
    kh = transform(hh, hkey, hostnqn)
    kc = None
    if cfg.get("ctrlkey"):
        ch, ckey = parse_secret(cfg["ctrlkey"])
        kc = transform(ch, ckey, subnqn)
    st = {"step": 0, "tid": -1, "status": 0, "auth": False, "hash": cfg["hash"], "group": cfg["dhgroup"],
          "c2": None, "s2": 0, "z": None}
    x = gen_private(st["group"], rng.randbytes(PRIV_BITS[st["group"]] // 8 + 8)) if st["group"] else 0

    def answer(status=0, data=b"", fatal=False):
        out({"status": status, "data": data.hex(), "fatal": fatal, "authenticated": st["auth"]})

    while True:
        m = inp()
        if m["op"] == "end":
            return
        if m["op"] == "state":
            answer()
            continue
        if m["op"] == "send":
            d = bytes.fromhex(m["data"])
            if d[0] == 0 and d[1] == 0:
                st["step"], st["tid"] = 0, struct.unpack_from("<H", d, 4)[0]
                halen, dhlen = d[10], d[11]
                hashes, groups = list(d[12:12 + halen]), list(d[42:42 + dhlen])
                if len(d) < 72 or d[6] or d[7] != 1 or d[8] != 1:
                    st["step"], st["status"] = 0xF1, 6
                elif st["hash"] not in hashes:
                    fb = [h for h in hashes if h in HASH]
                    if not fb:
                        st["step"], st["status"] = 0xF1, 4
                    else:
                        st["hash"] = fb[0]
                if st["step"] == 0:
                    st["step"] = 1
                answer()
            elif d[0] != 1 or d[1] != st["step"]:
                st["step"], st["status"] = 0xF0, 7
                answer(fatal=True)
            elif struct.unpack_from("<H", d, 4)[0] != st["tid"]:
                st["step"], st["status"] = 0xF1, 6
                answer()
            elif d[1] == 2:
                _, _, _, _, hl, _, cvalid, _, dhvlen, s2 = struct.unpack_from("<BBHHBBBBHI", d)
                h = st["hash"]
                ok = hl == HLEN[h]
                if ok and dhvlen:
                    try:
                        st["z"] = shared(st["group"], x, d[16 + 2 * hl:16 + 2 * hl + dhvlen])
                    except ValueError:
                        ok = False
                if ok:
                    chal = augmented(h, st["z"], st["c1"]) if st["z"] else st["c1"]
                    want = host_response(h, kh, chal, st["s1"], st["tid"], hostnqn, subnqn)
                    ok = hmac.compare_digest(want, d[16:16 + hl])
                if not ok:
                    st["step"], st["status"] = 0xF1, 1
                else:
                    st["s2"] = s2
                    st["c2"] = d[16 + hl:16 + 2 * hl] if cvalid and s2 else None
                    if not st["c2"]:
                        st["auth"] = True
                    st["step"] = 3
                answer()
            elif d[1] == 4:
                st["auth"] = True
                answer()
            else:
                st["step"], st["status"] = 0xF0, 7
                answer(fatal=True)
        elif m["op"] == "recv":
            h = st["hash"]
            if st["step"] == 1:
                st["c1"], st["s1"] = rng.randbytes(HLEN[h]), rng.randrange(1, 1 << 32)
                dhv = public(st["group"], x) if st["group"] else b""
                st["step"] = 2
                answer(data=challenge(st["tid"], h, st["group"], st["s1"], st["c1"], dhv))
            elif st["step"] == 3:
                rval = None
                if st["c2"]:
                    if not kc:
                        st["auth"] = False
                        answer(data=failure(0xF1, st["tid"], 1), fatal=True)
                        continue
                    chal = augmented(h, st["z"], st["c2"]) if st["z"] else st["c2"]
                    rval = ctrl_response(h, kc, chal, st["s2"], st["tid"], subnqn, hostnqn)
                st["step"] = 4
                answer(data=success1(st["tid"], HLEN[h], rval))
            else:
                status = st["status"] if st["step"] == 0xF1 else 1
                st["step"], st["auth"] = 0xF1, False
                answer(data=failure(0xF1, st["tid"] & 0xFFFF, status), fatal=True)


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "vectors"
    if mode == "vectors":
        json.dump(vectors(), sys.stdout, indent=1, sort_keys=True)
        sys.stdout.write("\n")
    elif mode == "host":
        while True:
            run_host(inp())
    elif mode == "ctrl":
        while True:
            run_ctrl(inp())
    else:
        sys.exit("usage: linuxref.py vectors|host|ctrl")


if __name__ == "__main__":
    main()
