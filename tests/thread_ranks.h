// Ranks as threads of one test process, sharing one store server on loopback.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "rcoll/store.h"

namespace rcoll::testing_support {

// Runs body(rank, store) on `size` threads, each with its own client of one
// TCP store server on 127.0.0.1, and joins them. A rank whose client cannot
// connect within 5 s fails the test and does not run `body`.
inline void run_thread_ranks(int size,
                             const std::function<void(int, std::shared_ptr<Store>)>& body) {
  TcpStoreOptions server_opts;
  server_opts.host = "127.0.0.1";
  server_opts.port = 0;
  auto server = start_tcp_store_server(server_opts);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  const uint16_t port = server.value()->port();
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      TcpStoreOptions so;
      so.host = "127.0.0.1";
      so.port = port;
      so.connect_timeout = std::chrono::milliseconds(5000);
      auto store = connect_tcp_store(so);
      if (!store.ok()) {
        ADD_FAILURE() << "rank " << r << ": " << store.status().to_string();
        return;
      }
      body(r, store.value());
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace rcoll::testing_support
