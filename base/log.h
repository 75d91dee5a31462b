// The logger: one of the two pieces of global mutable state (with the fault
// injector). Level from RCOLL_DEBUG (ERROR, WARN, INFO, DEBUG, TRACE; default WARN),
// optional file from RCOLL_DEBUG_FILE ("%r" becomes the rank). Every line names
// who (rank/peer), what (op, bytes), where (epoch, transport) and what happens next.
//
//   RCOLL_LOG(kWarn, "peer %d closed the connection during %s seq %llu; aborting epoch %lld", ...);
#pragma once

#include <cstdarg>
#include <string>

namespace rcoll::log {

enum class Level : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

bool enabled(Level level);
// Sets the process-wide prefix, e.g. "rank 2/4". Called once the rank is known.
void set_identity(const std::string& identity);
// Overrides the identity for lines logged by the calling thread (a
// communicator's progress thread), so several communicators in one process
// each log as their own rank.
void set_thread_identity(const std::string& identity);
// The usual identity of a thread working for one rank: "rank R/N".
void set_thread_rank(int rank, int size);
void write(Level level, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));

}  // namespace rcoll::log

#define RCOLL_LOG(level, ...)                                                   \
  do {                                                                          \
    if (::rcoll::log::enabled(::rcoll::log::Level::level))                      \
      ::rcoll::log::write(::rcoll::log::Level::level, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
