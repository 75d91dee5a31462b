// The runtime behind rcoll::Communicator: the op queue, the progress thread
// that runs ops in issue order, and the data plane of the current epoch.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "rcoll/communicator.h"
#include "runtime/algorithms/context.h"
#include "runtime/env.h"
#include "runtime/inject.h"
#include "runtime/op.h"
#include "transports/transport.h"

namespace rcoll {

class CommunicatorImpl : public ProgressGuard {
 public:
  static Result<std::unique_ptr<CommunicatorImpl>> create(Options options);
  ~CommunicatorImpl() override;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const Options& options() const { return options_; }

  // Validates, numbers and queues the op; returns at once.
  Work submit(Op op);
  void close();
  Counters counters() const;

 private:
  CommunicatorImpl(Options options, Bootstrap boot);
  Status connect_epoch(uint32_t epoch);
  void progress_loop();
  Status execute(const Op& op);
  Clock::duration progress_budget(const Op& op) const;
  Status on_stall(const Op& op, int peer, Clock::duration stalled_for) override;
  Status interrupted() override;
  // Applies the injected faults due at this op; sets the first-send faults on ctx.
  void inject_before(const Op& op, AlgoContext& ctx);

  Options options_;
  Bootstrap boot_;
  int rank_;
  int size_;
  std::shared_ptr<Store> store_;  // namespaced for this communicator instance
  Tuning tuning_;
  Scratch scratch_;
  std::unique_ptr<Transport> transport_;
  uint32_t epoch_ = 0;
  std::vector<Fault> faults_;  // from RCOLL_INJECT
  uint64_t random_state_ = 0;
  uint64_t injected_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> queue_;
  bool closing_ = false;
  bool closed_ = false;
  uint64_t next_seq_ = 0;
  uint64_t collective_seq_ = 0;
  std::vector<uint64_t> send_seq_;
  std::vector<uint64_t> recv_seq_;
  std::thread progress_;

  // Owned by the progress thread; read by counters() under mu_.
  Status fatal_;
  std::atomic<uint64_t> ops_done_{0};
  std::atomic<uint64_t> bytes_sent_{0};
  std::atomic<uint64_t> bytes_received_{0};
};

}  // namespace rcoll
