#include "base/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace rcoll::log {
namespace {

Level level_from_env() {
  const char* v = std::getenv("RCOLL_DEBUG");
  if (v == nullptr) return Level::kWarn;
  std::string s(v);
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (s == "ERROR") return Level::kError;
  if (s == "WARN" || s == "WARNING") return Level::kWarn;
  if (s == "INFO") return Level::kInfo;
  if (s == "DEBUG") return Level::kDebug;
  if (s == "TRACE") return Level::kTrace;
  return Level::kWarn;
}

struct Logger {
  std::mutex mu;
  Level level = level_from_env();
  std::string identity = "pid " + std::to_string(::getpid());
  FILE* out = stderr;
};

Logger& logger() {
  static Logger* l = new Logger();  // never destroyed: usable from any destructor
  return *l;
}

const char* level_name(Level level) {
  switch (level) {
    case Level::kError: return "ERROR";
    case Level::kWarn: return "WARN";
    case Level::kInfo: return "INFO";
    case Level::kDebug: return "DEBUG";
    case Level::kTrace: return "TRACE";
  }
  return "?";
}

thread_local std::string t_identity;
// What set_thread_rank last wrote into t_identity ({-1, -1}: something else is
// there): a blocking op sets it on every call, and the string need not be rebuilt.
thread_local int t_rank = -1;
thread_local int t_size = -1;

}  // namespace

void set_thread_identity(const std::string& identity) {
  t_identity = identity;
  t_rank = t_size = -1;
}

void set_thread_rank(int rank, int size) {
  if (rank == t_rank && size == t_size) return;
  set_thread_identity("rank " + std::to_string(rank) + "/" + std::to_string(size));
  t_rank = rank;
  t_size = size;
}

bool enabled(Level level) { return static_cast<int>(level) <= static_cast<int>(logger().level); }

void set_identity(const std::string& identity) {
  Logger& l = logger();
  std::lock_guard<std::mutex> lock(l.mu);
  l.identity = identity;
  if (const char* path = std::getenv("RCOLL_DEBUG_FILE"); path != nullptr && l.out == stderr) {
    std::string p(path);
    if (auto pos = p.find("%r"); pos != std::string::npos) {
      p.replace(pos, 2, identity.substr(identity.find_last_of(' ') + 1));
    }
    if (FILE* f = std::fopen(p.c_str(), "a")) l.out = f;
  }
}

void write(Level level, const char* file, int line, const char* fmt, ...) {
  char body[2048];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(body, sizeof(body), fmt, args);
  va_end(args);
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::system_clock::now().time_since_epoch())
                 .count();
  Logger& l = logger();
  std::lock_guard<std::mutex> lock(l.mu);
  std::fprintf(l.out, "rcoll %lld.%03lld %s [%s] %s (%s:%d)\n", static_cast<long long>(now / 1000),
               static_cast<long long>(now % 1000), level_name(level),
               t_identity.empty() ? l.identity.c_str() : t_identity.c_str(), body,
               base, line);
  std::fflush(l.out);
}

}  // namespace rcoll::log
