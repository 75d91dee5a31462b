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
    std::vector<std::string> full_keys;
    full_keys.reserve(keys.size());
    for (const auto& k : keys) full_keys.push_back(full(k));
    return inner_->wait(full_keys, timeout);
  }
  Result<bool> check(const std::string& key) override { return inner_->check(full(key)); }
  Status erase(const std::string& key) override { return inner_->erase(full(key)); }

 private:
  std::string full(const std::string& key) const { return prefix_ + key; }

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
