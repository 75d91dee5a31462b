// The epoch watch (runtime/epoch_watch.h): what a rank learns from the store
// with no request of its own while nothing happens. It sees the epoch's
// failed key, then its fatal notice; a new epoch starts it over; stop() ends a
// parked wait at once. Over the built-in TCP store (one parked request) and a
// file store (Store's default watch, which polls).
#include "runtime/epoch_watch.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "base/deadline.h"
#include "rcoll/store.h"

namespace rcoll {
namespace {

using namespace std::chrono_literals;

// Waits (at most 5 s) for `seen` to hold.
bool eventually(const std::function<bool()>& seen) {
  const Deadline d = Deadline::after(5s);
  while (!d.expired()) {
    if (seen()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return seen();
}

class EpochWatchTest : public testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam()) {
      TcpStoreOptions o;
      o.host = "127.0.0.1";
      auto server = start_tcp_store_server(o);
      ASSERT_TRUE(server.ok()) << server.status().to_string();
      server_ = std::move(server).value();
      o.port = server_->port();
      auto a = connect_tcp_store(o);
      auto b = connect_tcp_store(o);
      ASSERT_TRUE(a.ok() && b.ok());
      watched_ = std::move(a).value();
      writer_ = std::move(b).value();
    } else {
      std::string tmpl =
          (std::filesystem::temp_directory_path() / "rcoll_watch_test.XXXXXX").string();
      ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
      dir_ = tmpl;
      auto a = open_file_store(dir_);
      auto b = open_file_store(dir_);
      ASSERT_TRUE(a.ok() && b.ok());
      watched_ = std::move(a).value();
      writer_ = std::move(b).value();
    }
  }
  void TearDown() override {
    watched_.reset();
    writer_.reset();
    server_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  std::unique_ptr<TcpStoreServer> server_;
  std::string dir_;
  std::shared_ptr<Store> watched_;
  std::shared_ptr<Store> writer_;
};

TEST_P(EpochWatchTest, SeesTheFailedKeyThenTheFatalNoticeAndStartsOverForANewEpoch) {
  EpochWatch watch(10s, 200ms);
  watch.watch(watched_, 3, "epoch/3/failed", "epoch/3/fatal");
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(watch.failed(3));
  ASSERT_TRUE(writer_->set("epoch/3/failed", Bytes{1}).ok());
  EXPECT_TRUE(eventually([&] { return watch.failed(3); }));
  EXPECT_FALSE(watch.fatal(3));
  EXPECT_FALSE(watch.failed(4)) << "another epoch's";
  ASSERT_TRUE(writer_->set("epoch/3/fatal", Bytes{2}).ok());
  EXPECT_TRUE(eventually([&] { return watch.fatal(3); }));

  watch.watch(watched_, 4, "epoch/4/failed", "epoch/4/fatal");
  EXPECT_FALSE(watch.failed(4));
  EXPECT_FALSE(watch.fatal(4));
  EXPECT_FALSE(watch.failed(3)) << "what was seen of epoch 3 is not epoch 4's";
  ASSERT_TRUE(writer_->set("epoch/4/failed", Bytes{1}).ok());
  EXPECT_TRUE(eventually([&] { return watch.failed(4); }));
}

// A fatal notice written before the failed key (publish_fatal's order) is
// seen as soon as the failed key is.
TEST_P(EpochWatchTest, AFatalNoticeWrittenFirstIsSeenWithTheFailedKey) {
  ASSERT_TRUE(writer_->set("epoch/7/fatal", Bytes{2}).ok());
  ASSERT_TRUE(writer_->set("epoch/7/failed", Bytes{1}).ok());
  EpochWatch watch(10s, 200ms);
  watch.watch(watched_, 7, "epoch/7/failed", "epoch/7/fatal");
  EXPECT_TRUE(eventually([&] { return watch.failed(7) && watch.fatal(7); }));
}

// Waits last 10 s; stop() ends one at once (a closing communicator does not
// wait for it).
TEST_P(EpochWatchTest, StopEndsAParkedWaitAtOnce) {
  EpochWatch watch(10s, 200ms);
  watch.watch(watched_, 1, "epoch/1/failed", "epoch/1/fatal");
  std::this_thread::sleep_for(100ms);  // parked by now
  const auto t0 = Clock::now();
  watch.stop();
  EXPECT_LT(Clock::now() - t0, 5s) << "stop() waited for the wait's 10 s";
  EXPECT_FALSE(watch.failed(1));
}

INSTANTIATE_TEST_SUITE_P(Stores, EpochWatchTest, testing::Values(true, false),
                         [](const testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("Tcp") : std::string("File");
                         });

}  // namespace
}  // namespace rcoll
