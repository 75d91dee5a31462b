// A bound on every store call the calling thread makes while one of these is in
// scope (the earliest of nested ones wins). The store API takes no deadline for
// set/add/check/erase, and the TCP client gives each 30 s; a recovery bounded by
// its own timeout, or a best-effort report after a failure, must not wait that
// long on a stalled store host. A call cut short fails with kTimeout naming the
// store and the call, as a store that does not answer in time always does.
#pragma once

#include "base/deadline.h"

namespace rcoll {

class ScopedStoreDeadline {
 public:
  explicit ScopedStoreDeadline(Deadline d);
  ~ScopedStoreDeadline();
  ScopedStoreDeadline(const ScopedStoreDeadline&) = delete;
  ScopedStoreDeadline& operator=(const ScopedStoreDeadline&) = delete;

  // The bound in force on this thread (never() outside any scope).
  static Deadline current();

 private:
  Deadline previous_;
};

}  // namespace rcoll
