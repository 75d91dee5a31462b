#include "runtime/store/call_deadline.h"

namespace rcoll {
namespace {

thread_local Deadline t_bound = Deadline::never();

}  // namespace

ScopedStoreDeadline::ScopedStoreDeadline(Deadline d) : previous_(t_bound) { t_bound = t_bound.earlier(d); }

ScopedStoreDeadline::~ScopedStoreDeadline() { t_bound = previous_; }

Deadline ScopedStoreDeadline::current() { return t_bound; }

}  // namespace rcoll
