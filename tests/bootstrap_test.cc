// Bootstrap: identity from the environment (rcoll's own variables first, then
// torchrun, Open MPI, PMI, Slurm), malformed values, unreachable stores and
// peers, and network interface selection (RCOLL_SOCKET_IFNAME). Every failure
// must be a typed error that names what is wrong, within its deadline.
// Loopback (127.0.0.1) only.
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "rcoll/rcoll.h"
#include "runtime/env.h"
#include "transports/tcp/interfaces.h"

namespace rcoll {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

long ms_since(Clock::time_point t) {
  return static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count());
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

std::string unique_name() {
  static int counter = 0;
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string(info ? info->name() : "test") + "_" + std::to_string(counter++);
}

// A store that must never be used: bootstrap() only keeps the pointer.
class UnusedStore final : public Store {
 public:
  Status set(const std::string&, const Bytes&) override { return fail(); }
  Result<Bytes> get(const std::string&, std::chrono::milliseconds) override { return fail(); }
  Result<int64_t> add(const std::string&, int64_t) override { return fail(); }
  Status wait(const std::vector<std::string>&, std::chrono::milliseconds) override { return fail(); }
  Result<bool> check(const std::string&) override { return fail(); }
  Status erase(const std::string&) override { return fail(); }

 private:
  static Status fail() {
    ADD_FAILURE() << "bootstrap used the store";
    return Status(ErrorCode::kStore, "unused store");
  }
};

// Every variable bootstrap reads, cleared for each test and restored after it.
const char* const kVars[] = {
    "RCOLL_RANK",
    "RCOLL_WORLD_SIZE",
    "RANK",
    "WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "RCOLL_STORE_ADDR",
    "RCOLL_STORE_SERVE",
    "RCOLL_STORE_FILE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "RCOLL_SOCKET_IFNAME",
    "RCOLL_TRANSPORT",
    "RCOLL_JOB_TOKEN",
    "RCOLL_INJECT",
    "RCOLL_SOCKET_BUFFER_BYTES",
    "RCOLL_NCCL_PHASES",
    "RCOLL_NCCL_CONFIRM_EVERY",
    "RCOLL_NCCL_KEEP_IN_GROUP",
    "RCOLL_NCCL_BLOCKING",
};

class BootstrapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kVars) {
      const char* old = std::getenv(v);
      saved_[v] = old ? std::optional<std::string>(old) : std::nullopt;
      ::unsetenv(v);
    }
  }
  void TearDown() override {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }
  static void set(const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); }

  // Options that resolve identity from the environment and never touch the network.
  static Options env_options() {
    Options o;
    o.store = std::make_shared<UnusedStore>();
    return o;
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

void set_all_launchers() {
  ::setenv("RCOLL_RANK", "1", 1);
  ::setenv("RCOLL_WORLD_SIZE", "4", 1);
  ::setenv("RANK", "2", 1);
  ::setenv("WORLD_SIZE", "8", 1);
  ::setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  ::setenv("OMPI_COMM_WORLD_SIZE", "16", 1);
  ::setenv("PMI_RANK", "4", 1);
  ::setenv("PMI_SIZE", "32", 1);
  ::setenv("SLURM_PROCID", "5", 1);
  ::setenv("SLURM_NTASKS", "64", 1);
}

// ---- Identity precedence -------------------------------------------------------

TEST_F(BootstrapTest, RcollVariablesWinOverEveryLauncher) {
  set_all_launchers();
  auto b = bootstrap(env_options());
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b.value().rank, 1);
  EXPECT_EQ(b.value().size, 4);
  EXPECT_TRUE(contains(b.value().identity_source, "RCOLL_RANK")) << b.value().identity_source;
  EXPECT_EQ(b.value().store_description, "caller's store");
}

TEST_F(BootstrapTest, TorchrunWinsOverOpenMpiAndSlurm) {
  set_all_launchers();
  ::unsetenv("RCOLL_RANK");
  ::unsetenv("RCOLL_WORLD_SIZE");
  auto b = bootstrap(env_options());
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b.value().rank, 2);
  EXPECT_EQ(b.value().size, 8);
  EXPECT_TRUE(contains(b.value().identity_source, "torchrun")) << b.value().identity_source;
}

TEST_F(BootstrapTest, OpenMpiWinsOverPmiAndSlurm) {
  set_all_launchers();
  for (const char* v : {"RCOLL_RANK", "RCOLL_WORLD_SIZE", "RANK", "WORLD_SIZE"}) ::unsetenv(v);
  auto b = bootstrap(env_options());
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b.value().rank, 3);
  EXPECT_EQ(b.value().size, 16);
  EXPECT_TRUE(contains(b.value().identity_source, "Open MPI")) << b.value().identity_source;
}

TEST_F(BootstrapTest, PmiWinsOverSlurm) {
  set_all_launchers();
  for (const char* v : {"RCOLL_RANK", "RCOLL_WORLD_SIZE", "RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                        "OMPI_COMM_WORLD_SIZE"})
    ::unsetenv(v);
  auto b = bootstrap(env_options());
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b.value().rank, 4);
  EXPECT_EQ(b.value().size, 32);
  EXPECT_TRUE(contains(b.value().identity_source, "PMI")) << b.value().identity_source;
}

TEST_F(BootstrapTest, SlurmAlone) {
  set("SLURM_PROCID", "5");
  set("SLURM_NTASKS", "64");
  auto b = bootstrap(env_options());
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b.value().rank, 5);
  EXPECT_EQ(b.value().size, 64);
  EXPECT_TRUE(contains(b.value().identity_source, "Slurm")) << b.value().identity_source;
}

TEST_F(BootstrapTest, OptionsWinOverTheEnvironment) {
  set_all_launchers();
  Options o = env_options();
  o.rank = 0;
  o.world_size = 2;
  auto b = bootstrap(o);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b.value().rank, 0);
  EXPECT_EQ(b.value().size, 2);
  EXPECT_EQ(b.value().identity_source, "options");
}

TEST_F(BootstrapTest, NoVariablesMeansOneRank) {
  auto b = bootstrap(env_options());
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b.value().rank, 0);
  EXPECT_EQ(b.value().size, 1);
  EXPECT_TRUE(contains(b.value().identity_source, "default")) << b.value().identity_source;
}

TEST_F(BootstrapTest, JobTokenFromTheEnvironmentUnlessGiven) {
  set("RCOLL_JOB_TOKEN", "from-env");
  auto b = bootstrap(env_options());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b.value().job_token, "from-env");
  Options o = env_options();
  o.job_token = "from-options";
  auto b2 = bootstrap(o);
  ASSERT_TRUE(b2.ok());
  EXPECT_EQ(b2.value().job_token, "from-options");
}

// ---- Malformed identity ----------------------------------------------------------

TEST_F(BootstrapTest, MalformedRankNamesTheVariable) {
  for (const char* bad : {"abc", "1x", "-1", "1.5", "99999999999999999999"}) {
    set("RCOLL_RANK", bad);
    set("RCOLL_WORLD_SIZE", "4");
    auto b = bootstrap(env_options());
    ASSERT_FALSE(b.ok()) << "accepted RCOLL_RANK=" << bad;
    EXPECT_EQ(b.status().code(), ErrorCode::kInvalidArgument) << b.status().to_string();
    EXPECT_TRUE(contains(b.status().message(), "RCOLL_RANK")) << b.status().message();
    EXPECT_TRUE(contains(b.status().message(), bad)) << b.status().message();
  }
}

TEST_F(BootstrapTest, MalformedRankFailsCommunicatorCreate) {
  set("RCOLL_RANK", "abc");
  set("RCOLL_WORLD_SIZE", "2");
  const auto t0 = Clock::now();
  try {
    Communicator::create();
    ADD_FAILURE() << "create accepted RCOLL_RANK=abc";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_TRUE(contains(e.what(), "RCOLL_RANK")) << e.what();
    EXPECT_TRUE(contains(e.what(), "abc")) << e.what();
  }
  EXPECT_LT(ms_since(t0), 1000);
}

TEST_F(BootstrapTest, MalformedWorldSizeNamesTheVariable) {
  for (const char* bad : {"zero", "0", "-3"}) {
    set("RCOLL_RANK", "0");
    set("RCOLL_WORLD_SIZE", bad);
    auto b = bootstrap(env_options());
    ASSERT_FALSE(b.ok()) << "accepted RCOLL_WORLD_SIZE=" << bad;
    EXPECT_EQ(b.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_TRUE(contains(b.status().message(), "RCOLL_WORLD_SIZE")) << b.status().message();
  }
}

TEST_F(BootstrapTest, MalformedTorchrunRankNamesTheVariable) {
  set("RANK", "two");
  set("WORLD_SIZE", "4");
  auto b = bootstrap(env_options());
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(b.status().message(), "RANK='two'")) << b.status().message();
}

TEST_F(BootstrapTest, RankNotBelowSizeIsAnError) {
  set("RCOLL_RANK", "4");
  set("RCOLL_WORLD_SIZE", "4");
  auto b = bootstrap(env_options());
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(b.status().message(), "RCOLL_RANK=4")) << b.status().message();
  EXPECT_TRUE(contains(b.status().message(), "RCOLL_WORLD_SIZE=4")) << b.status().message();

  ::unsetenv("RCOLL_RANK");
  ::unsetenv("RCOLL_WORLD_SIZE");
  set("SLURM_PROCID", "7");
  set("SLURM_NTASKS", "2");
  b = bootstrap(env_options());
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(contains(b.status().message(), "SLURM_PROCID=7")) << b.status().message();
}

TEST_F(BootstrapTest, OptionsRankNotBelowSizeIsAnError) {
  for (auto [rank, size] : {std::pair{2, 2}, std::pair{5, 2}, std::pair{-1, 2}, std::pair{0, 0}}) {
    Options o = env_options();
    o.rank = rank;
    o.world_size = size;
    auto b = bootstrap(o);
    ASSERT_FALSE(b.ok()) << "accepted rank " << rank << " of " << size;
    EXPECT_EQ(b.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_TRUE(contains(b.status().message(), "Options.rank=" + std::to_string(rank))) << b.status().message();
    EXPECT_TRUE(contains(b.status().message(), "Options.world_size=" + std::to_string(size))) << b.status().message();
  }
  Options o;
  o.rank = 3;
  o.world_size = 3;
  EXPECT_THROW(Communicator::create(o), Error);
}

TEST_F(BootstrapTest, HalfAPairIsAnError) {
  set("RCOLL_RANK", "0");
  auto b = bootstrap(env_options());
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(b.status().message(), "RCOLL_RANK")) << b.status().message();
  EXPECT_TRUE(contains(b.status().message(), "RCOLL_WORLD_SIZE")) << b.status().message();
}

// ---- Rendezvous ----------------------------------------------------------------------

TEST_F(BootstrapTest, SeveralRanksWithoutRendezvousIsAnError) {
  Options o;
  o.rank = 1;
  o.world_size = 2;
  auto b = bootstrap(o);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(b.status().message(), "RCOLL_STORE_ADDR")) << b.status().message();
}

TEST_F(BootstrapTest, MalformedStoreAddressNamesTheVariable) {
  for (const char* bad : {"127.0.0.1", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:70000", "127.0.0.1:x"}) {
    set("RCOLL_STORE_ADDR", bad);
    Options o;
    o.rank = 1;
    o.world_size = 2;
    auto b = bootstrap(o);
    ASSERT_FALSE(b.ok()) << "accepted RCOLL_STORE_ADDR=" << bad;
    EXPECT_EQ(b.status().code(), ErrorCode::kInvalidArgument) << b.status().to_string();
    EXPECT_TRUE(contains(b.status().message(), "RCOLL_STORE_ADDR")) << b.status().message();
  }
}

TEST_F(BootstrapTest, MasterAddrWithoutPortIsAnError) {
  set("MASTER_ADDR", "127.0.0.1");
  Options o;
  o.rank = 1;
  o.world_size = 2;
  auto b = bootstrap(o);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(b.status().message(), "MASTER_PORT")) << b.status().message();
}

TEST_F(BootstrapTest, UnreachableStoreFailsWithinConnectTimeout) {
  set("RCOLL_STORE_ADDR", "127.0.0.1:1");  // nothing listens on port 1 of loopback
  Options o;
  o.rank = 1;
  o.world_size = 2;
  o.connect_timeout = 2000ms;
  const auto t0 = Clock::now();
  try {
    Communicator::create(o);
    ADD_FAILURE() << "create succeeded against a closed port";
  } catch (const Error& e) {
    const long took = ms_since(t0);
    EXPECT_EQ(e.code(), ErrorCode::kPeerUnreachable) << e.what();
    EXPECT_TRUE(contains(e.what(), "127.0.0.1:1")) << e.what();
    EXPECT_GE(took, 1500) << "gave up before the connect timeout: " << e.what();
    EXPECT_LT(took, 4000) << e.what();
  }
}

// A rank that starts before the store (rcoll-run, mpirun and Slurm start them in
// any order) keeps retrying until the store is up, within its connect timeout.
void create_against_late_store(std::chrono::milliseconds connect_timeout) {
  // Find a free loopback port, free it again, and start the store on it late.
  TcpStoreOptions so;
  so.host = "127.0.0.1";
  so.port = 0;
  auto probe = start_tcp_store_server(so);
  ASSERT_TRUE(probe.ok()) << probe.status().to_string();
  so.port = probe.value()->port();
  probe.value().reset();
  ::setenv("RCOLL_STORE_ADDR", ("127.0.0.1:" + std::to_string(so.port)).c_str(), 1);

  std::unique_ptr<TcpStoreServer> late;
  std::thread starter([&] {
    std::this_thread::sleep_for(500ms);
    auto s = start_tcp_store_server(so);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    late = std::move(s).value();
  });
  Options o;
  o.rank = 0;
  o.world_size = 1;
  o.name = unique_name();
  o.connect_timeout = connect_timeout;
  const auto t0 = Clock::now();
  try {
    Communicator c = Communicator::create(o);
    EXPECT_GE(ms_since(t0), 400) << "connected before the store existed?";
    std::vector<int32_t> v = {1, 2, 3};
    c.allreduce(Buffer::of(v), ReduceOp::kSum);
    EXPECT_EQ(v, (std::vector<int32_t>{1, 2, 3}));
  } catch (const Error& e) {
    ADD_FAILURE() << "after " << ms_since(t0) << " ms: " << e.what();
  }
  starter.join();
}

TEST_F(BootstrapTest, StoreThatStartsLateIsWaitedFor) { create_against_late_store(5000ms); }

TEST_F(BootstrapTest, HugeConnectTimeoutWaitsForALateStore) {
  create_against_late_store(std::chrono::milliseconds::max());
}

TEST_F(BootstrapTest, SingleRankHostsAPrivateStore) {
  auto b = bootstrap(Options{});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b.value().size, 1);
  ASSERT_NE(b.value().hosted_store, nullptr);
  ASSERT_NE(b.value().store, nullptr);
  EXPECT_TRUE(contains(b.value().store_description, "127.0.0.1")) << b.value().store_description;
  // The store answers.
  ASSERT_TRUE(b.value().store->set("k", Bytes{1, 2, 3}).ok());
  auto v = b.value().store->get("k", 1000ms);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(v.value(), (Bytes{1, 2, 3}));
}

// A one-rank creation with `name`=`value` set must fail with kInvalidArgument
// and a message that contains `names`.
void expect_refused_at_create(const char* name, const std::string& value,
                              const std::string& names) {
  ::setenv(name, value.c_str(), 1);
  Options o;
  o.rank = 0;
  o.world_size = 1;
  o.name = unique_name();
  try {
    Communicator::create(o);
    ADD_FAILURE() << "create accepted " << name << "=" << value;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_TRUE(contains(e.what(), names)) << e.what();
  }
}

TEST_F(BootstrapTest, UnknownTransportIsInvalid) {
  // A name that is no transport at all is malformed input; a real transport
  // this build lacks ("ucx" without UCX) is kUnsupported.
  expect_refused_at_create("RCOLL_TRANSPORT", "carrier-pigeon", "carrier-pigeon");
}

// A diagnostic switch is read as strictly as an option: "yes" is refused at
// creation, naming the variable; 0 and 1 are taken.
TEST_F(BootstrapTest, MalformedNcclPhasesIsInvalid) {
  expect_refused_at_create("RCOLL_NCCL_PHASES", "yes", "RCOLL_NCCL_PHASES");
  set("RCOLL_NCCL_PHASES", "1");
  Options o;
  o.rank = 0;
  o.world_size = 1;
  o.name = unique_name();
  EXPECT_NO_THROW(Communicator::create(o));
}

// The NCCL switches' defaults, unset: phases off (a diagnostic that reads the
// clock eight times an op), the kept input copied inside the op's group,
// blocking calls, every 16th collective confirmed on its own. (Stop 50 flipped
// the phases' default by accident while reverting another; nothing failed.)
TEST_F(BootstrapTest, NcclSwitchesDefaultAsDocumented) {
  auto phases = nccl_phases_requested();
  ASSERT_TRUE(phases.ok()) << phases.status().to_string();
  EXPECT_FALSE(phases.value());
  auto in_group = nccl_keep_in_group_requested();
  ASSERT_TRUE(in_group.ok()) << in_group.status().to_string();
  EXPECT_TRUE(in_group.value());
  Options o;
  ASSERT_TRUE(apply_env_overrides(&o).ok());
  EXPECT_EQ(o.nccl_blocking, 1);
  EXPECT_EQ(o.nccl_confirm_every, 16);
  set("RCOLL_NCCL_PHASES", "1");
  set("RCOLL_NCCL_KEEP_IN_GROUP", "0");
  set("RCOLL_NCCL_BLOCKING", "0");
  EXPECT_TRUE(nccl_phases_requested().value());
  EXPECT_FALSE(nccl_keep_in_group_requested().value());
  Options asked;
  ASSERT_TRUE(apply_env_overrides(&asked).ok());
  EXPECT_EQ(asked.nccl_blocking, 0);
}

// How often small collectives on NCCL are confirmed: at least every
// collective (1); 0 or a word is refused at creation, from the environment
// or from Options, naming it. The kept input's diagnostic switch likewise.
TEST_F(BootstrapTest, NcclConfirmEveryBelowOneIsInvalid) {
  expect_refused_at_create("RCOLL_NCCL_CONFIRM_EVERY", "0", "RCOLL_NCCL_CONFIRM_EVERY");
  expect_refused_at_create("RCOLL_NCCL_CONFIRM_EVERY", "often", "RCOLL_NCCL_CONFIRM_EVERY");
  ::unsetenv("RCOLL_NCCL_CONFIRM_EVERY");
  expect_refused_at_create("RCOLL_NCCL_KEEP_IN_GROUP", "2", "RCOLL_NCCL_KEEP_IN_GROUP");
  ::unsetenv("RCOLL_NCCL_KEEP_IN_GROUP");
  Options o;
  o.rank = 0;
  o.world_size = 1;
  o.name = unique_name();
  o.nccl_confirm_every = 0;
  try {
    Communicator::create(o);
    ADD_FAILURE() << "create accepted nccl_confirm_every = 0";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_TRUE(contains(e.what(), "nccl_confirm_every")) << e.what();
  }
  o.nccl_confirm_every = 1;
  o.name = unique_name();
  EXPECT_NO_THROW(Communicator::create(o));
}

// A socket buffer under one loopback segment stalled TCP for the whole
// connect timeout, and creation then failed as "peer unreachable ... check
// RCOLL_SOCKET_IFNAME". Now it is refused up front, naming where it came from;
// the smallest accepted value works.
TEST_F(BootstrapTest, SocketBufferBelowOneSegmentIsInvalid) {
  auto expect_refused = [](const Options& o, const std::string& source,
                           const std::string& limit = "at least 65536") {
    try {
      Communicator::create(o);
      ADD_FAILURE() << "create accepted " << source;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      EXPECT_TRUE(contains(e.what(), source)) << e.what();
      EXPECT_TRUE(contains(e.what(), limit)) << e.what();
    }
  };
  Options o;
  o.rank = 0;
  o.world_size = 1;
  o.name = unique_name();
  set("RCOLL_SOCKET_BUFFER_BYTES", "8192");
  expect_refused(o, "RCOLL_SOCKET_BUFFER_BYTES=8192");
  set("RCOLL_SOCKET_BUFFER_BYTES", "65535");
  expect_refused(o, "RCOLL_SOCKET_BUFFER_BYTES=65535");
  ::unsetenv("RCOLL_SOCKET_BUFFER_BYTES");
  o.socket_buffer_bytes = 16384;
  expect_refused(o, "Options::socket_buffer_bytes=16384");
  o.socket_buffer_bytes = (size_t{1} << 30) + 1;  // and the top, which the env range has
  expect_refused(o, "Options::socket_buffer_bytes=1073741825", "above 1073741824");
  o.socket_buffer_bytes = 65536;
  o.name = unique_name();
  EXPECT_NO_THROW(Communicator::create(o));
  o.socket_buffer_bytes = 0;
  set("RCOLL_SOCKET_BUFFER_BYTES", "65536");
  o.name = unique_name();
  EXPECT_NO_THROW(Communicator::create(o));
}

// ---- Unreachable peers -------------------------------------------------------------

struct StoreServer {
  std::unique_ptr<TcpStoreServer> server;
  std::shared_ptr<Store> client() const {
    TcpStoreOptions so;
    so.host = "127.0.0.1";
    so.port = server->port();
    so.connect_timeout = 3000ms;
    auto c = connect_tcp_store(so);
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    return c.ok() ? c.value() : nullptr;
  }
};

StoreServer start_store() {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  auto s = start_tcp_store_server(o);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return StoreServer{s.ok() ? std::move(s).value() : nullptr};
}

// Rank 0 "published" an address nobody listens on (port 1 of loopback) and is
// never started. Rank 1 must give up within its connect timeout, naming rank 0
// and the address it dialled.
TEST_F(BootstrapTest, PeerAtUnreachableAddressFailsNamingIt) {
  StoreServer ss = start_store();
  ASSERT_NE(ss.server, nullptr);
  auto store = ss.client();
  ASSERT_NE(store, nullptr);
  const std::string name = unique_name();
  // The keys rank 1 reads (runtime/communicator.cc connect_epoch,
  // transports/tcp/tcp_transport.cc establish): it takes ticket 2 of
  // "rcoll/<name>/instances", i.e. instance (2 - 1) / 2 = 0, then reads rank 0's
  // address for epoch 0 from "rcoll/<name>/0/tcp/0/0" as "IP PORT IFNAME".
  const std::string addr = "127.0.0.1 1 lo";
  ASSERT_TRUE(store->set("rcoll/" + name + "/0/tcp/0/0", Bytes(addr.begin(), addr.end())).ok());
  auto ticket = store->add("rcoll/" + name + "/instances", 1);
  ASSERT_TRUE(ticket.ok());
  ASSERT_EQ(ticket.value(), 1);

  // Before connecting, rank 1 compares its settings with rank 0's
  // ("rcoll/<name>/0/settings/<rank>"): the fake rank 0 has the same.
  std::thread same_settings([&, helper = ss.client()] {
    if (!helper) return;
    auto theirs = helper->get("rcoll/" + name + "/0/settings/1", 3000ms);
    if (theirs.ok()) (void)helper->set("rcoll/" + name + "/0/settings/0", theirs.value());
  });
  Options o;
  o.rank = 1;
  o.world_size = 2;
  o.store = store;
  o.name = name;
  o.socket_ifname = "=lo";
  o.connect_timeout = 3000ms;
  const auto t0 = Clock::now();
  try {
    Communicator::create(o);
    ADD_FAILURE() << "create connected to a peer that does not exist";
  } catch (const Error& e) {
    const long took = ms_since(t0);
    EXPECT_EQ(e.code(), ErrorCode::kPeerUnreachable) << e.what();
    EXPECT_EQ(e.status().context().peer, 0) << e.what();
    EXPECT_TRUE(contains(e.what(), "rank 0")) << e.what();
    EXPECT_TRUE(contains(e.what(), "127.0.0.1:1")) << e.what();
    EXPECT_GE(took, 2500) << "gave up before the connect timeout: " << e.what();
    EXPECT_LT(took, 10000) << e.what();
  }
  same_settings.join();
  // Rank 1 did publish its own listener before dialling.
  auto mine = store->check("rcoll/" + name + "/0/tcp/0/1");
  ASSERT_TRUE(mine.ok());
  EXPECT_TRUE(mine.value()) << "rank 1 did not publish its address under the expected key";
}

TEST_F(BootstrapTest, PeerThatNeverPublishesFailsNamingIt) {
  StoreServer ss = start_store();
  ASSERT_NE(ss.server, nullptr);
  auto store = ss.client();
  ASSERT_NE(store, nullptr);
  Options o;
  o.rank = 1;
  o.world_size = 2;
  o.store = store;
  o.name = unique_name();
  o.socket_ifname = "=lo";
  o.connect_timeout = 1500ms;
  const auto t0 = Clock::now();
  try {
    Communicator::create(o);
    ADD_FAILURE() << "create succeeded without rank 0";
  } catch (const Error& e) {
    const long took = ms_since(t0);
    EXPECT_EQ(e.code(), ErrorCode::kPeerUnreachable) << e.what();
    EXPECT_EQ(e.status().context().peer, 0) << e.what();
    // Found where the ranks first meet: comparing their settings.
    EXPECT_TRUE(contains(e.what(), "rank(s) 0 did not join within the join timeout")) << e.what();
    EXPECT_LT(took, 5000) << e.what();
  }
}

// ---- RCOLL_SOCKET_IFNAME ---------------------------------------------------------------

TEST_F(BootstrapTest, NonexistentInterfaceFailsEveryRankQuickly) {
  set("RCOLL_SOCKET_IFNAME", "=nonexistent0");
  StoreServer ss = start_store();
  ASSERT_NE(ss.server, nullptr);
  const std::string name = unique_name();
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      Options o;
      o.rank = r;
      o.world_size = 2;
      o.store = ss.client();
      o.name = name;
      o.connect_timeout = 8000ms;
      const auto t0 = Clock::now();
      try {
        Communicator::create(o);
        ADD_FAILURE() << "rank " << r << " created a communicator on a nonexistent interface";
      } catch (const Error& e) {
        EXPECT_LT(ms_since(t0), 3000) << "rank " << r << ": " << e.what();
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
        EXPECT_TRUE(contains(e.what(), "=nonexistent0")) << e.what();
        EXPECT_TRUE(contains(e.what(), "RCOLL_SOCKET_IFNAME")) << e.what();
        EXPECT_TRUE(contains(e.what(), "lo 127.0.0.1")) << "available interfaces not listed: " << e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
}

std::vector<NetInterface> synthetic() {
  return {
      {"lo", "127.0.0.1", true, false},
      {"docker0", "172.17.0.1", false, false},
      {"eth0", "10.0.0.1", false, false},
      {"eth01", "10.0.1.1", false, false},
      {"eth1", "10.0.0.2", false, false},
      {"ib0", "192.168.0.1", false, false},
  };
}

std::string pick(const std::vector<NetInterface>& all, const std::string& spec, bool prefer_loopback = false) {
  auto r = select_interface(all, spec, prefer_loopback);
  return r.ok() ? r.value().name + " " + r.value().address : "error: " + r.status().message();
}

TEST(SelectInterfaceTest, PrefixMatching) {
  const auto all = synthetic();
  EXPECT_EQ(pick(all, "eth"), "eth0 10.0.0.1");
  EXPECT_EQ(pick(all, "eth1"), "eth1 10.0.0.2");
  EXPECT_EQ(pick(all, "ib"), "ib0 192.168.0.1");
  EXPECT_EQ(pick(all, "ib,eth1"), "eth1 10.0.0.2") << "first interface in system order that matches any prefix";
  EXPECT_EQ(pick(all, "l"), "lo 127.0.0.1");
  // A prefix that matches nothing.
  EXPECT_TRUE(contains(pick(all, "wlan"), "error")) << pick(all, "wlan");
}

TEST(SelectInterfaceTest, ExactMatching) {
  const auto all = synthetic();
  EXPECT_EQ(pick(all, "=lo"), "lo 127.0.0.1");
  EXPECT_EQ(pick(all, "=eth01"), "eth01 10.0.1.1");
  EXPECT_EQ(pick(all, "=eth1"), "eth1 10.0.0.2");
  EXPECT_EQ(pick(all, "=ib0,eth1"), "eth1 10.0.0.2");
  // Exact does not match a prefix.
  auto r = select_interface(all, "=eth", false);
  ASSERT_FALSE(r.ok()) << r.value().name;
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(r.status().message(), "'=eth'")) << r.status().message();
  EXPECT_FALSE(select_interface(all, "=l", false).ok());
}

TEST(SelectInterfaceTest, Exclusion) {
  const auto all = synthetic();
  // "^lo" never picks lo.
  auto r = select_interface(all, "^lo", true);
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r.value().name, "lo");
  EXPECT_FALSE(r.value().loopback);
  EXPECT_EQ(pick(all, "^lo,docker"), "eth0 10.0.0.1");
  EXPECT_EQ(pick({{"lo", "127.0.0.1", true, false}, {"eth0", "10.0.0.1", false, false}}, "^lo"), "eth0 10.0.0.1");
  // Prefix exclusion removes eth0 and eth01; exact exclusion removes only eth0.
  const std::vector<NetInterface> eths = {{"eth0", "10.0.0.1", false, false},
                                          {"eth01", "10.0.1.1", false, false},
                                          {"lo", "127.0.0.1", true, false}};
  EXPECT_EQ(pick(eths, "^eth0"), "lo 127.0.0.1");
  EXPECT_EQ(pick(eths, "^=eth0"), "eth01 10.0.1.1");
  // Excluding everything is an error.
  auto none = select_interface(eths, "^eth,lo", false);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), ErrorCode::kInvalidArgument);
}

TEST(SelectInterfaceTest, ErrorNamesTheSpecAndListsInterfaces) {
  const auto all = synthetic();
  auto r = select_interface(all, "=nonexistent0", false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  const std::string& m = r.status().message();
  EXPECT_TRUE(contains(m, "RCOLL_SOCKET_IFNAME='=nonexistent0'")) << m;
  for (const auto& i : all) EXPECT_TRUE(contains(m, i.name + " " + i.address)) << m;
}

TEST(SelectInterfaceTest, DefaultChoice) {
  const auto all = synthetic();
  // All ranks on this host: loopback.
  EXPECT_EQ(pick(all, "", true), "lo 127.0.0.1");
  // Otherwise the first real interface: not loopback, not a container bridge.
  EXPECT_EQ(pick(all, "", false), "eth0 10.0.0.1");
  const std::vector<NetInterface> bridges = {{"lo", "127.0.0.1", true, false},
                                             {"docker0", "172.17.0.1", false, false},
                                             {"virbr0", "192.168.122.1", false, false},
                                             {"veth12", "10.10.0.1", false, false}};
  EXPECT_EQ(pick(bridges, "", false), "lo 127.0.0.1") << "loopback beats a container bridge";
  EXPECT_EQ(pick({{"docker0", "172.17.0.1", false, false}}, "", false), "docker0 172.17.0.1")
      << "a bridge when nothing else is up";
  EXPECT_EQ(pick({{"eth0", "10.0.0.1", false, false}}, "", true), "eth0 10.0.0.1")
      << "no loopback to prefer";
  auto empty = select_interface({}, "", false);
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_FALSE(select_interface({}, "eth", false).ok());
}

TEST(SelectInterfaceTest, RouteTowardTheStoreWinsOverListOrder) {
  // A rank with a dead interface listed first and the one that reaches the
  // store second: the route's source address picks the second.
  const std::vector<NetInterface> two = {{"lo", "127.0.0.1", true, false},
                                         {"eth0", "10.66.1.2", false, false},
                                         {"eth1", "10.77.0.2", false, false}};
  EXPECT_EQ(pick(two, "", false), "eth0 10.66.1.2") << "list order without a hint";
  auto r = select_interface(two, "", false, "10.77.0.2");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().name, "eth1");
  // An explicit spec and loopback-only jobs ignore the hint; an unknown one is no hint.
  EXPECT_EQ(select_interface(two, "eth0", false, "10.77.0.2").value().name, "eth0");
  EXPECT_EQ(select_interface(two, "", true, "10.77.0.2").value().name, "lo");
  EXPECT_EQ(select_interface(two, "", false, "10.9.9.9").value().name, "eth0");
}

TEST(SelectInterfaceTest, RouteSourceAddress) {
  EXPECT_EQ(route_source_address("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(route_source_address(""), "");
  EXPECT_EQ(route_source_address("no-such-host.invalid"), "");
}

TEST(SelectInterfaceTest, DescribeInterfaces) {
  EXPECT_EQ(describe_interfaces({}), "none");
  EXPECT_EQ(describe_interfaces({{"lo", "127.0.0.1", true, false}, {"eth0", "10.0.0.1", false, false}}),
            "lo 127.0.0.1, eth0 10.0.0.1");
}

TEST(SelectInterfaceTest, ThisHostHasLoopback) {
  const auto all = list_interfaces();
  bool found = false;
  for (const auto& i : all) {
    if (i.address == "127.0.0.1") {
      found = true;
      EXPECT_TRUE(i.loopback) << i.name;
      EXPECT_FALSE(i.ipv6);
    }
  }
  EXPECT_TRUE(found) << describe_interfaces(all);
  // IPv4 addresses come before IPv6 ones.
  bool seen_v6 = false;
  for (const auto& i : all) {
    if (i.ipv6) seen_v6 = true;
    else EXPECT_FALSE(seen_v6) << "IPv4 " << i.name << " after an IPv6 address: " << describe_interfaces(all);
  }
  auto r = select_interface(all, "", true);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.value().loopback);
}

}  // namespace
}  // namespace rcoll
