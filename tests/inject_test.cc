// The RCOLL_INJECT grammar: every documented form parses to the right faults,
// and every malformed one is refused with a message naming the problem.
#include <gtest/gtest.h>

#include "runtime/inject.h"

namespace rcoll {
namespace {

TEST(InjectSpec, ParsesTheDesignExample) {
  auto r = parse_fault_spec("close-link:rank=1,peer=2,op=20;stall:rank=3,op=40,ms=2000");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r.value().size(), 2u);
  const Fault& a = r.value()[0];
  EXPECT_EQ(a.kind, FaultKind::kCloseLink);
  EXPECT_EQ(a.rank, 1);
  EXPECT_EQ(a.peer, 2);
  EXPECT_EQ(a.op, 20u);
  const Fault& b = r.value()[1];
  EXPECT_EQ(b.kind, FaultKind::kStall);
  EXPECT_EQ(b.rank, 3);
  EXPECT_EQ(b.op, 40u);
  EXPECT_EQ(b.ms, 2000);
}

// A hang fires at every attempt of its op, so it cannot be drawn at random
// (one fault per op, once).
TEST(InjectSpec, HangParsesAndIsNotDrawnAtRandom) {
  auto r = parse_fault_spec("hang:rank=1,op=5");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r.value().size(), 1u);
  EXPECT_EQ(r.value()[0].kind, FaultKind::kHang);
  EXPECT_EQ(r.value()[0].rank, 1);
  EXPECT_EQ(r.value()[0].op, 5u);
  EXPECT_STREQ(to_string(FaultKind::kHang), "hang");
  auto random = parse_fault_spec("random:rate=0.1,seed=1,kinds=hang");
  ASSERT_FALSE(random.ok());
  EXPECT_NE(random.status().message().find("cannot be drawn at random"), std::string::npos)
      << random.status().to_string();
}

TEST(InjectSpec, ParsesEveryKind) {
  auto r = parse_fault_spec(
      "kill:rank=0,op=3; delay-chunk:rank=1,op=2,ms=5 ;drop-chunk:rank=2,op=9;"
      "fail-connect:transport=tcp,count=2;random:rate=0.05,seed=7,kinds=close-link+delay-chunk;"
      "bad-alloc:rank=1,op=4;throw:rank=0,op=2");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r.value().size(), 7u);
  EXPECT_EQ(r.value()[0].kind, FaultKind::kKill);
  EXPECT_EQ(r.value()[1].kind, FaultKind::kDelayChunk);
  EXPECT_EQ(r.value()[1].ms, 5);
  EXPECT_EQ(r.value()[2].kind, FaultKind::kDropChunk);
  EXPECT_EQ(r.value()[3].transport, "tcp");
  EXPECT_EQ(r.value()[3].count, 2);
  EXPECT_DOUBLE_EQ(r.value()[4].rate, 0.05);
  EXPECT_EQ(r.value()[4].seed, 7u);
  ASSERT_EQ(r.value()[4].random_kinds.size(), 2u);
  EXPECT_EQ(r.value()[4].random_kinds[1], FaultKind::kDelayChunk);
  EXPECT_EQ(r.value()[5].kind, FaultKind::kBadAlloc);
  EXPECT_EQ(r.value()[5].rank, 1);
  EXPECT_EQ(r.value()[5].op, 4u);
  EXPECT_EQ(r.value()[6].kind, FaultKind::kThrow);
  EXPECT_EQ(r.value()[6].rank, 0);
  EXPECT_EQ(r.value()[6].op, 2u);
}

// A kill in the middle of a recovery: after the ledgers, or before the connect.
TEST(InjectSpec, KillAtARecoveryStep) {
  auto r =
      parse_fault_spec("kill:rank=2,op=3,at=connect;kill:rank=1,op=4;kill:rank=0,op=5,at=confirm");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r.value().size(), 3u);
  EXPECT_EQ(r.value()[0].at, "connect");
  EXPECT_EQ(r.value()[1].at, "") << "no step: at the op itself";
  EXPECT_EQ(r.value()[2].at, "confirm");
  auto bad = parse_fault_spec("kill:rank=2,op=3,at=vote");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("at='vote' is not ledgers or connect"), std::string::npos)
      << bad.status().to_string();
  EXPECT_FALSE(parse_fault_spec("stall:rank=2,op=3,ms=5,at=connect").ok())
      << "only kill takes a step";
}

// A close-link on NCCL once the op's slices are done (at=done), and only that step.
TEST(InjectSpec, CloseLinkAtDone) {
  auto r = parse_fault_spec("close-link:rank=1,op=2,at=done;close-link:rank=0,op=3");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r.value().size(), 2u);
  EXPECT_EQ(r.value()[0].kind, FaultKind::kCloseLink);
  EXPECT_EQ(r.value()[0].at, "done");
  EXPECT_EQ(r.value()[1].at, "");
  auto bad = parse_fault_spec("close-link:rank=1,op=2,at=connect");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("at='connect' is not done"), std::string::npos)
      << bad.status().to_string();
  EXPECT_FALSE(parse_fault_spec("kill:rank=2,op=3,at=done").ok())
      << "done is close-link's step only";
}

TEST(InjectSpec, EmptySpecIsNoFaults) {
  auto r = parse_fault_spec("");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.value().empty());
}

struct BadSpec {
  const char* spec;
  const char* must_mention;
};

class InjectSpecRejects : public ::testing::TestWithParam<BadSpec> {};

TEST_P(InjectSpecRejects, WithAMessageNamingTheProblem) {
  auto r = parse_fault_spec(GetParam().spec);
  ASSERT_FALSE(r.ok()) << GetParam().spec;
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(GetParam().must_mention), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("RCOLL_INJECT"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(
    Malformed, InjectSpecRejects,
    ::testing::Values(BadSpec{"close-lnk:rank=1,op=2", "unknown kind 'close-lnk'"},
                      BadSpec{"stall:rank=1,op=2", "missing key 'ms'"},
                      BadSpec{"stall:rank=1,op=2,ms=abc", "ms='abc'"},
                      BadSpec{"stall:rank=1,op=0,ms=5", "op='0'"},
                      BadSpec{"kill:rank=-1,op=2", "rank='-1'"},
                      BadSpec{"kill:rank=1,op=2,color=red", "unknown key 'color'"},
                      BadSpec{"kill:rank=1,rank=2,op=2", "given twice"},
                      BadSpec{"kill:rank1,op=2", "not key=value"},
                      BadSpec{"fail-connect:transport=smoke,count=1", "transport 'smoke'"},
                      BadSpec{"random:rate=2,seed=1", "rate='2'"},
                      BadSpec{"random:rate=0.1,seed=1,kinds=kill+random", "cannot be drawn"},
                      BadSpec{"random:rate=0.1,seed=1,kinds=bad-alloc", "cannot be drawn"},
                      BadSpec{"bad-alloc:rank=1", "missing key 'op'"},
                      BadSpec{"random:rate=0.1,seed=1,kinds=throw", "cannot be drawn"},
                      BadSpec{"throw:op=2", "missing key 'rank'"},
                      BadSpec{"stall:rank=1,op=2,ms=99999999999", "ms='99999999999'"}));

}  // namespace
}  // namespace rcoll
