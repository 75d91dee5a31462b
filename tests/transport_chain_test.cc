// The fallback chain's decisions: which transports make the chain, when a
// rank votes to move down or back up, and what adopting an agreed vote does.
#include "runtime/transport_chain.h"

#include <gtest/gtest.h>

#include "transports/factory.h"

namespace rcoll {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TransportChain chain_of(std::vector<std::string> order, int failures = 3, milliseconds window = seconds(60),
                        milliseconds probe = seconds(300)) {
  Options o;
  o.transports = std::move(order);
  o.transport_failures_to_drop = failures;
  o.transport_failure_window = window;
  o.transport_probe_after = probe;
  std::vector<std::string> notes;
  auto c = TransportChain::make(o, &notes);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return std::move(c).value();
}

TEST(TransportChain, DefaultOrderSkipsWhatCannotServeHostBuffers) {
  Options o;
  std::vector<std::string> notes;
  auto c = TransportChain::make(o, &notes);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.value().order().back(), "tcp");
  EXPECT_EQ(c.value().order().front(), transport_built("ucx") ? "ucx" : "tcp");
  // nccl is never in a host-buffer chain, and the reason is recorded.
  for (const auto& t : c.value().order()) EXPECT_NE(t, "nccl");
  bool explained = false;
  for (const auto& n : notes) explained |= n.rfind("nccl:", 0) == 0;
  EXPECT_TRUE(explained);
}

TEST(TransportChain, PinnedTransportIsTheWholeChain) {
  Options o;
  o.transport = "tcp";
  o.transports = {"ucx", "tcp"};
  std::vector<std::string> notes;
  auto c = TransportChain::make(o, &notes);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.value().order(), std::vector<std::string>{"tcp"});
  EXPECT_FALSE(c.value().has_next());
}

// Pinning nccl leaves host buffers nowhere to go: unsupported, saying why
// (or, in a build without NCCL, that it is not built in).
TEST(TransportChain, PinnedNcclIsUnsupported) {
  Options o;
  o.transport = "nccl";
  std::vector<std::string> notes;
  auto c = TransportChain::make(o, &notes);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kUnsupported);
  const char* why = transport_built("nccl") ? "device buffers only" : "not available in this build";
  EXPECT_NE(c.status().message().find(why), std::string::npos) << c.status().to_string();
}

TEST(TransportChain, NcclServesDeviceCollectivesBesideTheHostChain) {
  Options o;
  o.transports = {"nccl", "tcp"};
  std::vector<std::string> notes;
  auto c = TransportChain::make(o, &notes);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c.value().order(), std::vector<std::string>{"tcp"});
  EXPECT_EQ(c.value().nccl(), transport_built("nccl"));
  o.transports = {"tcp"};
  auto without = TransportChain::make(o, &notes);
  ASSERT_TRUE(without.ok());
  EXPECT_FALSE(without.value().nccl());
}

TEST(TransportChain, UnknownNameIsInvalid) {
  Options o;
  o.transports = {"tcp", "carrier-pigeon"};
  std::vector<std::string> notes;
  auto c = TransportChain::make(o, &notes);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kInvalidArgument);
}

TEST(TransportChain, DuplicatesAreIgnored) {
  auto c = chain_of({"tcp", "tcp"});
  EXPECT_EQ(c.order().size(), 1u);
}

TEST(TransportChain, ConnectFailureDropsToTheNext) {
  if (!transport_built("ucx")) GTEST_SKIP() << "needs a second transport (UCX not built)";
  auto c = chain_of({"ucx", "tcp"});
  EXPECT_EQ(c.current(), "ucx");
  EXPECT_TRUE(c.drop_current(Clock::now()));
  EXPECT_EQ(c.current(), "tcp");
  EXPECT_EQ(c.fallbacks(), 1u);
  EXPECT_FALSE(c.drop_current(Clock::now())) << "nothing below the last transport";
  EXPECT_EQ(c.current(), "tcp");
}

TEST(TransportChain, VotesDownAfterKFailuresWithinTheWindow) {
  if (!transport_built("ucx")) GTEST_SKIP() << "needs a second transport (UCX not built)";
  auto c = chain_of({"ucx", "tcp"}, 3, seconds(60));
  const auto t0 = Clock::now();
  EXPECT_EQ(c.vote_after_failure(t0), 0u);
  EXPECT_EQ(c.vote_after_failure(t0 + seconds(1)), 0u);
  EXPECT_EQ(c.vote_after_failure(t0 + seconds(2)), 1u) << "third failure within 60 s";
  EXPECT_TRUE(c.adopt(1, t0 + seconds(2)));
  EXPECT_EQ(c.current(), "tcp");
  EXPECT_EQ(c.fallbacks(), 1u);
}

TEST(TransportChain, OldFailuresLeaveTheWindow) {
  if (!transport_built("ucx")) GTEST_SKIP() << "needs a second transport (UCX not built)";
  auto c = chain_of({"ucx", "tcp"}, 2, seconds(10));
  const auto t0 = Clock::now();
  EXPECT_EQ(c.vote_after_failure(t0), 0u);
  EXPECT_EQ(c.vote_after_failure(t0 + seconds(11)), 0u) << "the first failure is outside the window";
  EXPECT_EQ(c.vote_after_failure(t0 + seconds(12)), 1u);
}

TEST(TransportChain, ProbesBackUpOnlyAfterTheCoolDown) {
  if (!transport_built("ucx")) GTEST_SKIP() << "needs a second transport (UCX not built)";
  auto c = chain_of({"ucx", "tcp"}, 1, seconds(60), seconds(300));
  const auto t0 = Clock::now();
  EXPECT_TRUE(c.drop_current(t0));
  EXPECT_EQ(c.vote_after_failure(t0 + seconds(10)), 1u) << "stay: cool-down not over (and tcp is the last)";
  EXPECT_EQ(c.vote_after_failure(t0 + seconds(301)), 0u) << "cool-down over: try ucx again";
  EXPECT_TRUE(c.adopt(0, t0 + seconds(301)));
  EXPECT_EQ(c.current(), "ucx");
  EXPECT_EQ(c.probes(), 1u);
  EXPECT_FALSE(c.adopt(0, t0 + seconds(302))) << "adopting the current index changes nothing";
}

TEST(TransportChain, AdoptClampsToTheChain) {
  auto c = chain_of({"tcp"});
  EXPECT_FALSE(c.adopt(7, Clock::now()));
  EXPECT_EQ(c.current(), "tcp");
}

// The factory (transports/factory.h) is the one place that knows transport
// names: the chain, the option parsers and the fault injector ask it.
TEST(TransportFactory, KnowsEveryTransportByNameInTheDefaultOrder) {
  std::vector<std::string> names;
  for (const auto& t : known_transports()) names.emplace_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"nccl", "ucx", "tcp"}));
  EXPECT_EQ(transport_names_or(), "tcp, ucx or nccl");
  ASSERT_NE(find_transport("tcp"), nullptr);
  EXPECT_TRUE(find_transport("tcp")->built);
  EXPECT_TRUE(find_transport("tcp")->host_memory);
  ASSERT_NE(find_transport("nccl"), nullptr);
  EXPECT_FALSE(find_transport("nccl")->host_memory);
  EXPECT_EQ(find_transport("gloo"), nullptr);
  EXPECT_EQ(find_transport("TCP"), nullptr) << "names are exact";
  for (const auto& name : built_transports()) EXPECT_TRUE(transport_built(name)) << name;
}

TEST(TransportFactory, RefusesWhatCannotCarryAnEpochNamingIt) {
  HostConnectParams p;
  p.rank = 3;
  p.epoch = 7;
  for (const char* name : {"nccl", "gloo"}) {
    auto t = connect_host_transport(name, p);
    ASSERT_FALSE(t.ok()) << name;
    EXPECT_EQ(t.status().code(), ErrorCode::kUnsupported) << name;
    EXPECT_EQ(t.status().context().transport, name);
    EXPECT_EQ(t.status().context().rank, 3);
    EXPECT_EQ(t.status().context().epoch, 7);
    EXPECT_NE(t.status().message().find(std::string("transport '") + name + "'"), std::string::npos)
        << t.status().to_string();
  }
}

TEST(TransportChain, UnknownNameIsAnInvalidArgumentListingTheKnownOnes) {
  Options o;
  o.transports = {"tcp", "rdma"};
  std::vector<std::string> notes;
  auto c = TransportChain::make(o, &notes);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("'rdma' is not tcp, ucx or nccl"), std::string::npos)
      << c.status().to_string();
}

}  // namespace
}  // namespace rcoll
