// Micro-benchmarks of the runtime's per-frame and per-op bookkeeping, the
// costs resilience adds to every transfer: encoding, decoding and matching a
// frame header (every frame), taking and returning a pooled backup buffer and
// backing up a window of an in-place op (every window), and publishing and
// agreeing on ledgers (every recovery, not every op).
#include <benchmark/benchmark.h>

#include <cstring>
#include <string>
#include <vector>

#include "runtime/ledger.h"
#include "transports/frame.h"

namespace rcoll {
namespace {

FrameHeader sample_header() {
  FrameHeader h;
  h.type = FrameType::kData;
  h.op_kind = OpKind::kAllreduce;
  h.dtype = static_cast<uint8_t>(DataType::kFloat32);
  h.redop = static_cast<uint8_t>(ReduceOp::kSum);
  h.epoch = 3;
  h.op_seq = 123456;
  h.count = 16u << 20;
  h.chunk = 77;
  h.step = 2;
  h.payload_bytes = 128u << 10;
  return h;
}

void BM_FrameEncode(benchmark::State& state) {
  FrameHeader h = sample_header();
  for (auto _ : state) {
    FrameBytes b = encode(h);
    benchmark::DoNotOptimize(b);
    ++h.chunk;
  }
}
BENCHMARK(BM_FrameEncode);

void BM_FrameDecode(benchmark::State& state) {
  const FrameBytes b = encode(sample_header());
  for (auto _ : state) {
    auto h = decode_frame_header(b.data(), b.size());
    benchmark::DoNotOptimize(h);
  }
}
BENCHMARK(BM_FrameDecode);

// What a receiver does per arriving frame: decode, then check it against the expected one.
void BM_FrameDecodeAndMatch(benchmark::State& state) {
  const FrameHeader want = sample_header();
  const FrameBytes b = encode(want);
  const ErrorContext ctx{0, 1, want.op_seq, want.epoch, "bench"};
  for (auto _ : state) {
    auto got = decode_frame_header(b.data(), b.size());
    Status s = match_frame(want, got.value(), ctx);
    benchmark::DoNotOptimize(s);
  }
}
BENCHMARK(BM_FrameDecodeAndMatch);

// A window's backup buffer from the pool and back (steady state: recycled).
void BM_BufferPoolTakeGive(benchmark::State& state) {
  BufferPool pool(256u << 20);
  const size_t bytes = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    PooledBuffer b = pool.take(bytes);
    benchmark::DoNotOptimize(b.data());
  }
}
BENCHMARK(BM_BufferPoolTakeGive)->Arg(128 << 10)->Arg(4 << 20);

// A 4 KiB backup from a pool holding 64 free blocks of that size, as after the
// completion credits let go of a period of small eager broadcasts at once.
void BM_BufferPoolTakeFromMany(benchmark::State& state) {
  BufferPool pool(256u << 20);
  {
    std::vector<PooledBuffer> held;
    for (int i = 0; i < 64; ++i) held.push_back(pool.take(4096));
  }
  for (auto _ : state) {
    PooledBuffer b = pool.take(4096);
    benchmark::DoNotOptimize(b.data());
  }
  state.counters["free_blocks"] = static_cast<double>(pool.free_bytes() / 4096);
}
BENCHMARK(BM_BufferPoolTakeFromMany);

Op allreduce_op(std::vector<float>& data, uint64_t seq) {
  Op op;
  op.kind = OpKind::kAllreduce;
  op.seq = seq;
  op.match_seq = seq;
  op.in = Buffer{data.data(), data.size(), DataType::kFloat32};
  op.out = op.in;
  return op;
}

// Backing up one window (4 slices of 128 KiB x 4 ranks) of an in-place
// allreduce: the copy an in-place op pays before each window.
void BM_BackUpWindow(benchmark::State& state) {
  std::vector<float> data(16u << 20 >> 2, 1.0f);  // 16 MiB
  Tuning tuning;
  ReplayLog log(256u << 20, 16u << 20);
  const int size = 4;
  for (auto _ : state) {
    OpRecord rec;
    rec.op = allreduce_op(data, 1);
    rec.pool = log.pool();
    rec.total = 8;
    rec.back_up(0, size, 0, 4);
    benchmark::DoNotOptimize(rec.backups.data());
  }
  const size_t window_bytes = 4 * tuning.piece_bytes * size;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * window_bytes));
}
BENCHMARK(BM_BackUpWindow);

// Logging one completed 4 KiB send while the log holds every send the sockets
// may still hold (16 MiB to the peer: 4097 records), as a stream of small
// point-to-point sends keeps it: the cost every such send pays.
void BM_ReplayLogPushSend(benchmark::State& state) {
  const size_t bytes = 4096;
  std::vector<char> data(bytes, 1);
  ReplayLog log(256u << 20, 16u << 20);
  log.reset(2);
  uint64_t seq = 0;
  auto push = [&] {
    OpRecord r;
    r.op.kind = OpKind::kSendRecv;
    r.op.is_send = true;
    r.op.peer = 1;
    r.op.in = r.op.out = Buffer{data.data(), bytes, DataType::kUint8};
    r.op.seq = r.op.match_seq = ++seq;
    r.pool = log.pool();
    r.complete = true;
    r.done = r.total = 1;
    r.tuning.piece_bytes = 1u << 20;
    r.back_up(0, 2, 0, 1);
    log.push(std::move(r));
  };
  for (int i = 0; i < 5000; ++i) push();  // steady state: 4097 records
  for (auto _ : state) push();
  state.counters["records"] = static_cast<double>(log.records().size());
}
BENCHMARK(BM_ReplayLogPushSend);

// A recovery's ledger step at 8 ranks: serialize this rank's log, parse and
// agree on every rank's (once per recovery).
void BM_LedgerAgree8Ranks(benchmark::State& state) {
  std::vector<float> data(1024, 1.0f);
  ReplayLog log(256u << 20, 16u << 20);
  log.send_through.assign(8, 0);
  log.recv_through.assign(8, 0);
  for (uint64_t s = 1; s <= 3; ++s) {
    OpRecord rec;
    rec.op = allreduce_op(data, s);
    rec.pool = log.pool();
    rec.total = 4;
    rec.done = 4;
    rec.complete = true;
    log.push(std::move(rec));
    log.collective_through = s;
  }
  for (auto _ : state) {
    const std::string mine = serialize_ledger(log, {}, 8);
    std::vector<std::string> all(8, mine);
    auto plan = agree_resume(0, 8, log, {}, all);
    benchmark::DoNotOptimize(plan);
  }
}
BENCHMARK(BM_LedgerAgree8Ranks);

}  // namespace
}  // namespace rcoll

BENCHMARK_MAIN();
