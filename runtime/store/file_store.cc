// A store on a shared directory: one file per key. Writers create a temp file
// and rename() it over the key's file, so a reader sees the old value or the
// new one, never half of one. add() serialises on an flock()ed lock file per
// key. get/wait poll with a sleep that starts at 1 ms and grows to 20 ms, so a
// waiter sees a write within ~20 ms without hammering the file system.
//
// File names: "k." + the key with every byte outside [A-Za-z0-9._-] written as
// %XX. A key whose escaped name would pass kMaxEscapedName becomes "h." + a
// 128-bit hash of the key (not cryptographic: keys come from the job itself).
// Temp files are "t.*", lock files "l.*"; the prefixes keep them apart and
// make "." and ".." impossible as names.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/deadline.h"
#include "base/unique_fd.h"
#include "rcoll/store.h"
#include "runtime/store/store_text.h"
#include "runtime/store/tcp_store_protocol.h"

namespace rcoll {
namespace {

constexpr size_t kMaxEscapedName = 200;  // well under NAME_MAX (255)
constexpr Millis kFirstPoll{1};
constexpr Millis kMaxPoll{20};
// How long add() waits for another process's lock before giving up.
constexpr Millis kLockTimeout{30000};

using store::errno_text;
using store::key_text;

uint64_t mix64(uint64_t x) {  // splitmix64 finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

uint64_t fnv1a(const std::string& s, uint64_t basis) {
  uint64_t h = basis;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return mix64(h ^ s.size());
}

std::string file_name(const std::string& key) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out = "k.";
  for (unsigned char c : key) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
        c == '_' || c == '-') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
    if (out.size() > kMaxEscapedName) break;
  }
  if (out.size() <= kMaxEscapedName) return out;
  char buf[40];
  std::snprintf(buf, sizeof(buf), "h.%016llx%016llx",
                static_cast<unsigned long long>(fnv1a(key, 0xcbf29ce484222325ULL)),
                static_cast<unsigned long long>(fnv1a(key, 0x84222325cbf29ce4ULL)));
  return buf;
}

// Sleeps between polls: 1 ms, growing by half each time to 20 ms, never past the deadline.
class Backoff {
 public:
  void sleep(const Deadline& d) {
    auto pause = std::min<Clock::duration>(next_, d.remaining());
    std::this_thread::sleep_for(pause);
    next_ = std::min(Millis(next_.count() + std::max<int64_t>(1, next_.count() / 2)), kMaxPoll);
  }

 private:
  Millis next_ = kFirstPoll;
};

class FileStore final : public Store {
 public:
  explicit FileStore(std::filesystem::path dir) : dir_(std::move(dir)) {
    std::random_device rd;
    nonce_ = (uint64_t{rd()} << 32) ^ rd();
  }

  Status set(const std::string& key, const Bytes& value) override {
    if (Status s = check_key(key); !s.ok()) return s;
    if (value.size() > store_wire::kMaxValueLength) {
      return Status(ErrorCode::kInvalidArgument, "store value for " + key_text(key) + " has " +
                                                     std::to_string(value.size()) +
                                                     " bytes, above the limit of " +
                                                     std::to_string(store_wire::kMaxValueLength));
    }
    return write_atomically(key, value);
  }

  Result<Bytes> get(const std::string& key, std::chrono::milliseconds timeout) override {
    if (Status s = check_key(key); !s.ok()) return s;
    Deadline d = Deadline::after(std::max(timeout, Millis(0)));
    Backoff backoff;
    for (;;) {
      Bytes value;
      bool found = false;
      if (Status s = read(key, value, found); !s.ok()) return s;
      if (found) return value;
      if (d.expired()) {
        return Status(ErrorCode::kTimeout, "timed out after " + std::to_string(timeout.count()) +
                                               " ms waiting for store key " + key_text(key) +
                                               " in the file store at " + dir_.string());
      }
      backoff.sleep(d);
    }
  }

  Result<int64_t> add(const std::string& key, int64_t delta) override {
    if (Status s = check_key(key); !s.ok()) return s;
    auto lock_path = dir_ / ("l." + file_name(key));
    UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (!lock.valid()) return io_error("cannot open the lock file for add(" + key_text(key) + ")");
    Deadline d = Deadline::after(kLockTimeout);
    Backoff backoff;
    while (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR) {
        return io_error("cannot lock " + lock_path.string() + " for add(" + key_text(key) + ")");
      }
      if (d.expired()) {
        return Status(ErrorCode::kTimeout, "add(" + key_text(key) + ") in the file store at " +
                                               dir_.string() + ": another process held " +
                                               lock_path.string() + " for " +
                                               std::to_string(kLockTimeout.count()) + " ms");
      }
      backoff.sleep(d);
    }
    // Released when `lock` closes.
    Bytes current;
    bool found = false;
    if (Status s = read(key, current, found); !s.ok()) return s;
    int64_t value = 0;
    if (found && !store_wire::parse_counter(current, value)) {
      return Status(ErrorCode::kInvalidArgument, "add(" + key_text(key) +
                                                     ") in the file store at " + dir_.string() +
                                                     ": the stored value is not an integer");
    }
    int64_t next = 0;
    if (__builtin_add_overflow(value, delta, &next)) {
      return Status(ErrorCode::kInvalidArgument, "add(" + key_text(key) + ", " +
                                                     std::to_string(delta) + ") overflows int64 (" +
                                                     std::to_string(value) + ")");
    }
    if (Status s = write_atomically(key, store_wire::format_counter(next)); !s.ok()) return s;
    return next;
  }

  Status wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    for (const auto& k : keys) {
      if (Status s = check_key(k); !s.ok()) return s;
    }
    Deadline d = Deadline::after(std::max(timeout, Millis(0)));
    std::vector<std::string> absent = keys;
    Backoff backoff;
    for (;;) {
      std::vector<std::string> still;
      for (const auto& k : absent) {
        auto present = exists(k);
        if (!present.ok()) return present.status();
        if (!present.value()) still.push_back(k);
      }
      absent = std::move(still);
      if (absent.empty()) return Status();
      if (d.expired()) {
        std::string names;
        for (size_t i = 0; i < absent.size() && i < 16; ++i) {
          if (i) names += ", ";
          names += key_text(absent[i]);
        }
        if (absent.size() > 16) names += " and " + std::to_string(absent.size() - 16) + " more";
        return Status(ErrorCode::kTimeout, "timed out after " + std::to_string(timeout.count()) +
                                               " ms waiting for store key" +
                                               (absent.size() == 1 ? " " : "s ") + names + " (" +
                                               std::to_string(absent.size()) + " of " +
                                               std::to_string(keys.size()) +
                                               " missing) in the file store at " + dir_.string());
      }
      backoff.sleep(d);
    }
  }

  Result<bool> check(const std::string& key) override {
    if (Status s = check_key(key); !s.ok()) return s;
    return exists(key);
  }

  Status erase(const std::string& key) override {
    if (Status s = check_key(key); !s.ok()) return s;
    auto path = dir_ / file_name(key);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return io_error("cannot erase " + key_text(key) + " (" + path.string() + ")");
    }
    return Status();
  }

 private:
  static Status check_key(const std::string& key) {
    if (key.size() > store_wire::kMaxKeyLength) {
      return Status(ErrorCode::kInvalidArgument, "store key of " + std::to_string(key.size()) +
                                                     " bytes exceeds the limit of " +
                                                     std::to_string(store_wire::kMaxKeyLength) +
                                                     " (key starts \"" + key.substr(0, 64) + "\")");
    }
    return Status();
  }

  Status io_error(const std::string& what) const {
    return Status(ErrorCode::kStore,
                  "file store at " + dir_.string() + ": " + what + ": " + errno_text(errno));
  }

  Result<bool> exists(const std::string& key) const {
    struct stat st {};
    auto path = dir_ / file_name(key);
    if (::stat(path.c_str(), &st) == 0) return true;
    if (errno == ENOENT) return false;
    return io_error("cannot stat " + path.string());
  }

  Status read(const std::string& key, Bytes& out, bool& found) const {
    found = false;
    auto path = dir_ / file_name(key);
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) {
      if (errno == ENOENT) return Status();
      return io_error("cannot open " + path.string());
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return io_error("cannot stat " + path.string());
    if (st.st_size < 0 || static_cast<uint64_t>(st.st_size) > store_wire::kMaxValueLength) {
      return Status(ErrorCode::kStore, "file store at " + dir_.string() + ": " + path.string() +
                                           " holds " + std::to_string(st.st_size) +
                                           " bytes, more than any store value may");
    }
    // The file is never modified after its rename, so its size is final.
    out.resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < out.size()) {
      ssize_t n = ::read(fd.get(), out.data() + done, out.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return io_error("cannot read " + path.string());
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    out.resize(done);
    found = true;
    return Status();
  }

  Status write_atomically(const std::string& key, const Bytes& value) {
    char tmp_name[64];
    std::snprintf(tmp_name, sizeof(tmp_name), "t.%d.%016llx.%llu", static_cast<int>(::getpid()),
                  static_cast<unsigned long long>(nonce_),
                  static_cast<unsigned long long>(counter_.fetch_add(1)));
    auto tmp = dir_ / tmp_name;
    auto path = dir_ / file_name(key);
    {
      UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
      if (!fd.valid()) return io_error("cannot create " + tmp.string() + " for " + key_text(key));
      size_t done = 0;
      while (done < value.size()) {
        ssize_t n = ::write(fd.get(), value.data() + done, value.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          Status s = io_error("cannot write " + tmp.string() + " for " + key_text(key));
          ::unlink(tmp.c_str());
          return s;
        }
        done += static_cast<size_t>(n);
      }
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      Status s = io_error("cannot rename " + tmp.string() + " to " + path.string());
      ::unlink(tmp.c_str());
      return s;
    }
    return Status();
  }

  std::filesystem::path dir_;
  uint64_t nonce_ = 0;
  std::atomic<uint64_t> counter_{0};
};

}  // namespace

Result<std::shared_ptr<Store>> open_file_store(const std::string& directory) {
  if (directory.empty()) {
    return Status(ErrorCode::kInvalidArgument, "open_file_store: the directory name is empty");
  }
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  if (ec) {
    return Status(ErrorCode::kStore,
                  "cannot create the file store directory " + directory + ": " + ec.message());
  }
  if (!std::filesystem::is_directory(directory, ec)) {
    return Status(ErrorCode::kStore, "the file store path " + directory + " is not a directory");
  }
  return std::shared_ptr<Store>(std::make_shared<FileStore>(directory));
}

}  // namespace rcoll
