// The wire header (transports/frame.h): every field survives encode/decode,
// the byte layout is the documented one, and the decoder refuses anything a
// peer could send that is not a well-formed rcoll frame.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "rcoll/types.h"
#include "transports/frame.h"

namespace rcoll {
namespace {

// A header whose every field differs from its default and from its neighbours,
// so a swapped or dropped field shows up.
FrameHeader sample_header() {
  FrameHeader h;
  h.type = FrameType::kData;
  h.op_kind = OpKind::kReduceScatter;
  h.dtype = static_cast<uint8_t>(DataType::kBfloat16);
  h.redop = static_cast<uint8_t>(ReduceOp::kMax);
  h.epoch = 0xA1B2C3D4u;
  h.root = -7;
  h.op_seq = 0x0102030405060708ull;
  h.count = 0x1122334455667788ull;
  h.chunk = 0xCAFEBABEu;
  h.step = 0xBEEF;
  h.flags = 0x5AA5;
  h.payload_bytes = kMaxFramePayload;  // the largest accepted
  return h;
}

template <typename T>
T read_at(const FrameBytes& b, size_t off) {
  T v;
  std::memcpy(&v, b.data() + off, sizeof(T));
  return v;
}

void expect_equal(const FrameHeader& a, const FrameHeader& b) {
  EXPECT_EQ(a.type, b.type);
  EXPECT_EQ(a.op_kind, b.op_kind);
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.redop, b.redop);
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.root, b.root);
  EXPECT_EQ(a.op_seq, b.op_seq);
  EXPECT_EQ(a.count, b.count);
  EXPECT_EQ(a.chunk, b.chunk);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.flags, b.flags);
  EXPECT_EQ(a.payload_bytes, b.payload_bytes);
}

TEST(FrameTest, RoundTripsEveryField) {
  const FrameHeader h = sample_header();
  FrameBytes b = encode(h);
  ASSERT_EQ(b.size(), kFrameHeaderBytes);
  auto d = decode_frame_header(b.data(), b.size());
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  expect_equal(d.value(), h);
  EXPECT_TRUE(d.value().same_op(h));
  EXPECT_TRUE(d.value().same_position(h));
}

TEST(FrameTest, RoundTripsEveryTypeKindDtypeAndRedop) {
  for (uint8_t type = 1; type <= 4; ++type) {
    for (uint8_t kind = 0; kind <= static_cast<uint8_t>(kLastOpKind); ++kind) {
      for (int dtype = 0; dtype < kNumDataTypes; ++dtype) {
        for (int redop = 0; redop < kNumReduceOps; ++redop) {
          FrameHeader h;
          h.type = static_cast<FrameType>(type);
          h.op_kind = static_cast<OpKind>(kind);
          h.dtype = static_cast<uint8_t>(dtype);
          h.redop = static_cast<uint8_t>(redop);
          h.op_seq = 1000u * type + 100u * kind + 10u * dtype + redop;
          FrameBytes b = encode(h);
          auto d = decode_frame_header(b.data(), b.size());
          ASSERT_TRUE(d.ok()) << "type " << int(type) << " kind " << int(kind) << " dtype " << dtype
                              << " redop " << redop << ": " << d.status().to_string();
          expect_equal(d.value(), h);
        }
      }
    }
  }
}

TEST(FrameTest, RoundTripsExtremeValues) {
  FrameHeader h;
  h.epoch = UINT32_MAX;
  h.root = INT32_MIN;
  h.op_seq = UINT64_MAX;
  h.count = UINT64_MAX;
  h.chunk = UINT32_MAX;
  h.step = UINT16_MAX;
  h.flags = UINT16_MAX;
  h.payload_bytes = 0;
  FrameBytes b = encode(h);
  auto d = decode_frame_header(b.data(), b.size());
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  expect_equal(d.value(), h);

  h.root = INT32_MAX;
  b = encode(h);
  d = decode_frame_header(b.data(), b.size());
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.value().root, INT32_MAX);
}

TEST(FrameTest, LayoutMatchesTheDocumentedOffsets) {
  const FrameHeader h = sample_header();
  FrameBytes b = encode(h);
  EXPECT_EQ(read_at<uint32_t>(b, 0), kFrameMagic);
  EXPECT_EQ(b[0], 'R');
  EXPECT_EQ(b[1], 'C');
  EXPECT_EQ(b[2], 'C');
  EXPECT_EQ(b[3], '1');
  EXPECT_EQ(b[4], static_cast<uint8_t>(FrameType::kData));
  EXPECT_EQ(b[5], static_cast<uint8_t>(OpKind::kReduceScatter));
  EXPECT_EQ(b[6], static_cast<uint8_t>(DataType::kBfloat16));
  EXPECT_EQ(b[7], static_cast<uint8_t>(ReduceOp::kMax));
  EXPECT_EQ(read_at<uint32_t>(b, 8), h.epoch);
  EXPECT_EQ(read_at<int32_t>(b, 12), h.root);
  EXPECT_EQ(read_at<uint64_t>(b, 16), h.op_seq);
  EXPECT_EQ(read_at<uint64_t>(b, 24), h.count);
  EXPECT_EQ(read_at<uint32_t>(b, 32), h.chunk);
  EXPECT_EQ(read_at<uint16_t>(b, 36), h.step);
  EXPECT_EQ(read_at<uint16_t>(b, 38), h.flags);
  EXPECT_EQ(read_at<uint64_t>(b, 40), h.payload_bytes);
}

TEST(FrameTest, DecodeAcceptsTrailingBytesAndReadsOnlyTheHeader) {
  const FrameHeader h = sample_header();
  FrameBytes b = encode(h);
  std::vector<uint8_t> longer(b.begin(), b.end());
  longer.resize(longer.size() + 16, 0xFF);
  auto d = decode_frame_header(longer.data(), longer.size());
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  expect_equal(d.value(), h);
}

TEST(FrameTest, DecodeRejectsEveryTruncatedLength) {
  FrameBytes b = encode(sample_header());
  for (size_t len = 0; len < kFrameHeaderBytes; ++len) {
    // A fresh heap copy of exactly `len` bytes, so a read past it is caught by ASan.
    std::vector<uint8_t> part(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(len));
    auto d = decode_frame_header(part.empty() ? nullptr : part.data(), len);
    ASSERT_FALSE(d.ok()) << "accepted a " << len << "-byte header";
    EXPECT_EQ(d.status().code(), ErrorCode::kTransport);
    EXPECT_NE(d.status().message().find("truncated"), std::string::npos) << d.status().message();
    EXPECT_NE(d.status().message().find(std::to_string(len) + " of 48"), std::string::npos)
        << d.status().message();
  }
}

TEST(FrameTest, DecodeRejectsWrongMagic) {
  FrameBytes b = encode(sample_header());
  for (size_t i = 0; i < 4; ++i) {
    FrameBytes bad = b;
    bad[i] ^= 0x20;
    auto d = decode_frame_header(bad.data(), bad.size());
    ASSERT_FALSE(d.ok()) << "flipped magic byte " << i;
    EXPECT_EQ(d.status().code(), ErrorCode::kTransport);
    EXPECT_NE(d.status().message().find("magic"), std::string::npos) << d.status().message();
  }
  // An HTTP client or another protocol talking to our port.
  FrameBytes http{};
  std::memcpy(http.data(), "GET / HTTP/1.1\r\n", 16);
  auto d = decode_frame_header(http.data(), http.size());
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("not an rcoll peer"), std::string::npos) << d.status().message();
}

TEST(FrameTest, DecodeRejectsUnknownType) {
  for (int type : {0, static_cast<int>(kLastFrameType) + 1, 10, 127, 255}) {
    FrameBytes b = encode(sample_header());
    b[4] = static_cast<uint8_t>(type);
    auto d = decode_frame_header(b.data(), b.size());
    ASSERT_FALSE(d.ok()) << "accepted type " << type;
    EXPECT_EQ(d.status().code(), ErrorCode::kTransport);
    EXPECT_NE(d.status().message().find("unknown frame type " + std::to_string(type)), std::string::npos)
        << d.status().message();
  }
}

TEST(FrameTest, DecodeRejectsUnknownOpKind) {
  for (int kind : {static_cast<int>(kLastOpKind) + 1, 9, 200, 255}) {
    FrameBytes b = encode(sample_header());
    b[5] = static_cast<uint8_t>(kind);
    auto d = decode_frame_header(b.data(), b.size());
    ASSERT_FALSE(d.ok()) << "accepted op kind " << kind;
    EXPECT_EQ(d.status().code(), ErrorCode::kTransport);
    EXPECT_NE(d.status().message().find("unknown op kind " + std::to_string(kind)), std::string::npos)
        << d.status().message();
  }
}

TEST(FrameTest, DecodeRejectsDtypeOutOfRange) {
  for (int dtype : {kNumDataTypes, kNumDataTypes + 1, 77, 255}) {
    FrameBytes b = encode(sample_header());
    b[6] = static_cast<uint8_t>(dtype);
    auto d = decode_frame_header(b.data(), b.size());
    ASSERT_FALSE(d.ok()) << "accepted dtype " << dtype;
    EXPECT_EQ(d.status().code(), ErrorCode::kTransport);
    EXPECT_NE(d.status().message().find("dtype " + std::to_string(dtype)), std::string::npos)
        << d.status().message();
  }
}

TEST(FrameTest, DecodeRejectsRedopOutOfRange) {
  for (int redop : {kNumReduceOps, kNumReduceOps + 1, 77, 255}) {
    FrameBytes b = encode(sample_header());
    b[7] = static_cast<uint8_t>(redop);
    auto d = decode_frame_header(b.data(), b.size());
    ASSERT_FALSE(d.ok()) << "accepted redop " << redop;
    EXPECT_EQ(d.status().code(), ErrorCode::kTransport);
    EXPECT_NE(d.status().message().find("reduce op " + std::to_string(redop)), std::string::npos)
        << d.status().message();
  }
}

TEST(FrameTest, DecodeRejectsPayloadOverTheLimit) {
  for (uint64_t payload : {kMaxFramePayload + 1, kMaxFramePayload * 2, UINT64_MAX}) {
    FrameHeader h = sample_header();
    h.payload_bytes = payload;
    FrameBytes b = encode(h);
    auto d = decode_frame_header(b.data(), b.size());
    ASSERT_FALSE(d.ok()) << "accepted payload " << payload;
    EXPECT_EQ(d.status().code(), ErrorCode::kTransport);
    EXPECT_NE(d.status().message().find(std::to_string(payload)), std::string::npos) << d.status().message();
    EXPECT_NE(d.status().message().find(std::to_string(kMaxFramePayload)), std::string::npos)
        << d.status().message();
  }
  FrameHeader ok = sample_header();
  ok.payload_bytes = kMaxFramePayload;
  FrameBytes b = encode(ok);
  EXPECT_TRUE(decode_frame_header(b.data(), b.size()).ok());
}

TEST(FrameTest, SameOpAndSamePositionCompareTheRightFields) {
  const FrameHeader h = sample_header();
  FrameHeader o = h;
  o.chunk += 1;
  EXPECT_TRUE(h.same_op(o));
  EXPECT_FALSE(h.same_position(o));
  o = h;
  o.count += 1;
  EXPECT_FALSE(h.same_op(o));
  EXPECT_TRUE(h.same_position(o));
  o = h;
  o.op_kind = OpKind::kAllgather;
  EXPECT_FALSE(h.same_op(o));
  o = h;
  o.root = 3;
  EXPECT_FALSE(h.same_op(o));
  o = h;
  o.payload_bytes -= 1;
  EXPECT_FALSE(h.same_position(o));
}

TEST(FrameTest, DescribeOpNamesKindSeqDtypeAndCount) {
  FrameHeader h;
  h.op_kind = OpKind::kAllreduce;
  h.op_seq = 7;
  h.dtype = static_cast<uint8_t>(DataType::kFloat32);
  h.redop = static_cast<uint8_t>(ReduceOp::kSum);
  h.count = 1048576;
  EXPECT_EQ(describe_op(h), "allreduce seq 7 (float32 x 1048576, sum)");

  h.op_kind = OpKind::kAllgather;
  h.op_seq = 12;
  h.dtype = static_cast<uint8_t>(DataType::kInt64);
  h.count = 33;
  std::string s = describe_op(h);
  EXPECT_NE(s.find("allgather"), std::string::npos) << s;
  EXPECT_NE(s.find("seq 12"), std::string::npos) << s;
  EXPECT_NE(s.find("int64"), std::string::npos) << s;
  EXPECT_NE(s.find("x 33"), std::string::npos) << s;
  EXPECT_EQ(s.find("sum"), std::string::npos) << "allgather has no reduce op: " << s;

  h.op_kind = OpKind::kBroadcast;
  h.root = 2;
  s = describe_op(h);
  EXPECT_NE(s.find("broadcast"), std::string::npos) << s;
  EXPECT_NE(s.find("root 2"), std::string::npos) << s;

  h.op_kind = OpKind::kSendRecv;
  h.root = 5;
  h.dtype = static_cast<uint8_t>(DataType::kUint8);
  h.count = 100;
  s = describe_op(h);
  EXPECT_NE(s.find("from rank 5"), std::string::npos) << s;
  EXPECT_NE(s.find("uint8 x 100"), std::string::npos) << s;

  h.op_kind = OpKind::kReduceScatter;
  h.redop = static_cast<uint8_t>(ReduceOp::kAvg);
  h.dtype = static_cast<uint8_t>(DataType::kFloat16);
  s = describe_op(h);
  EXPECT_NE(s.find("reduce_scatter"), std::string::npos) << s;
  EXPECT_NE(s.find("float16"), std::string::npos) << s;
  EXPECT_NE(s.find("avg"), std::string::npos) << s;
}

TEST(FrameTest, DescribeFrameAddsPosition) {
  FrameHeader h;
  h.op_kind = OpKind::kAllreduce;
  h.op_seq = 7;
  h.count = 10;
  h.chunk = 3;
  h.step = 2;
  h.epoch = 4;
  h.payload_bytes = 40;
  std::string s = describe_frame(h);
  EXPECT_NE(s.find("allreduce seq 7"), std::string::npos) << s;
  EXPECT_NE(s.find("chunk 3 step 2"), std::string::npos) << s;
  EXPECT_NE(s.find("epoch 4"), std::string::npos) << s;
  EXPECT_NE(s.find("40 bytes"), std::string::npos) << s;
}

TEST(FrameTest, OpKindNames) {
  EXPECT_STREQ(to_string(OpKind::kAllreduce), "allreduce");
  EXPECT_STREQ(to_string(OpKind::kAllgather), "allgather");
  EXPECT_STREQ(to_string(OpKind::kReduceScatter), "reduce_scatter");
  EXPECT_STREQ(to_string(OpKind::kBroadcast), "broadcast");
  EXPECT_STREQ(to_string(OpKind::kBarrier), "barrier");
  EXPECT_STREQ(to_string(OpKind::kAlltoall), "alltoall");
  EXPECT_STREQ(to_string(OpKind::kSendRecv), "send/recv");
  EXPECT_STREQ(to_string(static_cast<OpKind>(99)), "invalid-op-kind");
}

}  // namespace
}  // namespace rcoll
