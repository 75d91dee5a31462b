// A view of another store with every key under "prefix/": one namespace per
// communicator and epoch over one shared store. Errors come from the inner
// store and so name the full (prefixed) keys, which is what an operator sees
// when inspecting the store.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "rcoll/store.h"

namespace rcoll {
namespace {

class PrefixStore final : public Store {
 public:
  PrefixStore(std::shared_ptr<Store> inner, std::string prefix)
      : inner_(std::move(inner)), prefix_(std::move(prefix) + "/") {}

  Status set(const std::string& key, const Bytes& value) override {
    return inner_->set(full(key), value);
  }
  Result<Bytes> get(const std::string& key, std::chrono::milliseconds timeout) override {
    return inner_->get(full(key), timeout);
  }
  Result<int64_t> add(const std::string& key, int64_t delta) override {
    return inner_->add(full(key), delta);
  }
  Status wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    return inner_->wait(full(keys), timeout);
  }
  Result<bool> check(const std::string& key) override { return inner_->check(full(key)); }
  Status erase(const std::string& key) override { return inner_->erase(full(key)); }
  Result<int64_t> set_and_add(const std::string& key, const Bytes& value,
                              const std::string& counter, int64_t delta) override {
    return inner_->set_and_add(full(key), value, full(counter), delta);
  }
  Result<Published> publish_and_wait(const std::string& key, const Bytes& value,
                                     const std::string& counter, int64_t until,
                                     const std::vector<std::string>& wait_keys,
                                     std::chrono::milliseconds timeout) override {
    return inner_->publish_and_wait(full(key), value, full(counter), until, full(wait_keys),
                                    timeout);
  }
  Result<std::vector<Bytes>> multi_get(const std::vector<std::string>& keys,
                                       std::chrono::milliseconds timeout) override {
    return inner_->multi_get(full(keys), timeout);
  }
  Status erase_many(const std::vector<std::string>& keys) override {
    return inner_->erase_many(full(keys));
  }
  Result<bool> watch(const std::string& key, std::chrono::milliseconds timeout,
                     const std::function<bool()>& cancelled) override {
    return inner_->watch(full(key), timeout, cancelled);
  }
  Result<std::vector<std::string>> absent(const std::vector<std::string>& keys) override {
    auto missing = inner_->absent(full(keys));
    if (!missing.ok()) return missing.status();
    for (std::string& k : missing.value()) k.erase(0, prefix_.size());
    return missing;
  }

 private:
  std::string full(const std::string& key) const { return prefix_ + key; }
  std::vector<std::string> full(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    out.reserve(keys.size());
    for (const auto& k : keys) out.push_back(full(k));
    return out;
  }

  std::shared_ptr<Store> inner_;
  std::string prefix_;
};

}  // namespace

std::shared_ptr<Store> make_prefix_store(std::shared_ptr<Store> inner, std::string prefix) {
  // A null inner store is a programming error; fail loudly at construction
  // rather than with a null dereference at the first call.
  if (!inner) throw Error(ErrorCode::kInvalidArgument, "make_prefix_store: inner store is null");
  return std::make_shared<PrefixStore>(std::move(inner), std::move(prefix));
}

}  // namespace rcoll
