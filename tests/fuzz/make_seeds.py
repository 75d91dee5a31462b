#!/usr/bin/env python3
"""Writes the seed corpora in tests/fuzz/corpus/ (run once; the files are committed).

Valid messages of every kind plus a few broken ones, so the fuzzers start from
inputs that reach deep into the decoders and the store server's session."""
import os
import struct

here = os.path.dirname(os.path.abspath(__file__))


def write(fuzzer, name, data):
    d = os.path.join(here, "corpus", fuzzer)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- frames (transports/frame.h)
def frame(type_, kind=0, dtype=0, redop=0, epoch=0, root=-1, seq=0, count=0, chunk=0, step=0, flags=0, payload=b"",
          payload_bytes=None):
    n = len(payload) if payload_bytes is None else payload_bytes
    return struct.pack("<IBBBBIiQQIHHQ", 0x31434352, type_, kind, dtype, redop, epoch, root, seq, count, chunk, step,
                       flags, n) + payload


write("frame_fuzzer", "hello", frame(2, epoch=3, root=1, seq=0xcbf29ce484222325, count=4))
write("frame_fuzzer", "hello_ack", frame(3, epoch=3, root=0, count=4))
write("frame_fuzzer", "data_allreduce", frame(1, kind=2, dtype=8, redop=0, epoch=1, root=-1, seq=7, count=1024,
                                              chunk=3, step=2, payload=bytes(range(64))))
write("frame_fuzzer", "data_sendrecv", frame(1, kind=1, dtype=2, epoch=0, root=2, seq=1, count=16, payload=b"\x01" * 64))
write("frame_fuzzer", "abort_reason", frame(4, epoch=2, root=1, payload=b"rank 1: link closed"))
write("frame_fuzzer", "heartbeat_goodbye", frame(5, epoch=1, root=0, seq=12, flags=1) + frame(6, root=0))
write("frame_fuzzer", "huge_payload_claim", frame(1, kind=2, payload_bytes=1 << 62))
write("frame_fuzzer", "truncated", frame(5, root=0)[:30])
write("frame_fuzzer", "bad_magic", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b"\0" * 24)

# ---- store messages (runtime/store/tcp_store_protocol.h)
OPS = {"hello": 1, "set": 2, "get": 3, "add": 4, "wait": 5, "check": 6, "erase": 7, "set_add": 8, "multi_get": 9,
       "erase_many": 10}


def request(op, keys=(), value=b"", integer=0, magic=0x51534352, version=2):
    body = struct.pack("<I", len(keys))
    for k in keys:
        body += struct.pack("<I", len(k)) + k
    body += struct.pack("<I", len(value)) + value + struct.pack("<q", integer)
    return struct.pack("<IBBHI", magic, OPS[op] if isinstance(op, str) else op, version, 0, len(body)) + body


hello = request("hello", value=b"fuzz-token")
write("store_fuzzer", "hello_only", hello)
write("store_fuzzer", "hello_set_get", hello + request("set", [b"k"], b"v") + request("get", [b"k"], integer=100))
write("store_fuzzer", "hello_add_check_erase",
      hello + request("add", [b"n"], integer=5) + request("check", [b"n"]) + request("erase", [b"n"]))
write("store_fuzzer", "hello_wait_parked", hello + request("wait", [b"a", b"b", b"c"], integer=50))
write("store_fuzzer", "hello_get_then_more", hello + request("get", [b"missing"], integer=10) + request("set", [b"x"], b"1"))
write("store_fuzzer", "wrong_token", request("hello", value=b"stranger"))
write("store_fuzzer", "set_before_hello", request("set", [b"k"], b"v"))
write("store_fuzzer", "second_hello", hello + hello)
write("store_fuzzer", "response", request(0, [b"k"], b"value", magic=0x52534352))
write("store_fuzzer", "huge_body_claim", struct.pack("<IBBHI", 0x51534352, 2, 2, 0, 0xFFFFFFF0))
write("store_fuzzer", "many_keys_claim", struct.pack("<IBBHI", 0x51534352, 5, 2, 0, 24) +
      struct.pack("<I", 1 << 30) + b"\0" * 20)
write("store_fuzzer", "bad_version", request("set", [b"k"], b"v", version=9))
write("store_fuzzer", "exchange_ops",
      hello + request("set_add", [b"x/0", b"x/n"], b"v0", integer=1) + request("set_add", [b"x/1", b"x/n"], b"v1", integer=1) +
      request("multi_get", [b"x/0", b"x/1", b"x/0"], integer=100) + request("wait", [b"x/0", b"x/9"], integer=0) +
      request("erase_many", [b"x/0", b"x/1", b"x/n"]))
write("store_fuzzer", "multi_get_parked", hello + request("multi_get", [b"later", b"x"], integer=50) + request("set", [b"later"], b"1"))
write("store_fuzzer", "counter_text", hello + request("set", [b"c"], b"-9223372036854775808") + request("add", [b"c"], integer=-1))

# ---- environment values (env_fuzzer: inject spec, ifname spec, store addr, then RCOLL_* values)
write("env_fuzzer", "typical", b"close-link:rank=1,peer=2,op=20;stall:rank=3,op=40,ms=2000\neth,ib\n127.0.0.1:29500\n"
      b"tcp\n1000\n8000\n1\n0\n30000\n1500\n1800000\n131072")
write("env_fuzzer", "random_fault", b"random:rate=0.02,seed=11,kinds=close-link+delay-chunk\n^docker\n[::1]:1\n")
write("env_fuzzer", "every_kind", b"kill:rank=0,op=1;delay-chunk:rank=1,op=2,ms=5;drop-chunk:rank=2,op=3;"
      b"fail-connect:transport=tcp,count=2\n=eth0\nhost:65535\nauto\n")
write("env_fuzzer", "bad_values", b"stall:rank=1,op=2\n^=lo,eth\n:80\nudp\n-5\n99999999999999999999\n2\n")
write("env_fuzzer", "empty", b"")
