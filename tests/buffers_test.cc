// Memory that follows the work: pooled backup blocks are reused while busy,
// kept within their budget, and released when the communicator goes idle; the
// algorithms' scratch space likewise.
#include <gtest/gtest.h>

#include "runtime/algorithms/context.h"
#include "runtime/ledger.h"

namespace rcoll {
namespace {

TEST(BufferPool, ReusesWithinItsBudgetAndTrimsToNothing) {
  BufferPool pool(1u << 20);
  char* first = nullptr;
  {
    PooledBuffer a = pool.take(256 * 1024);
    first = a.data();
  }
  EXPECT_EQ(pool.free_bytes(), 256u * 1024);
  {
    PooledBuffer b = pool.take(100 * 1024);  // the free block fits: reused, not allocated
    EXPECT_EQ(b.data(), first);
    PooledBuffer big = pool.take(2u << 20);  // over the budget: freed when given back
  }
  EXPECT_EQ(pool.free_bytes(), 256u * 1024);
  EXPECT_EQ(pool.trim(), 256u * 1024);
  EXPECT_EQ(pool.free_bytes(), 0u);
}

TEST(Scratch, ReleaseGivesTheMemoryBack) {
  Scratch s;
  EXPECT_NE(s.get(1u << 20), nullptr);
  EXPECT_EQ(s.release(), 1u << 20);
  EXPECT_EQ(s.release(), 0u);
  EXPECT_NE(s.get(16), nullptr);
}

}  // namespace
}  // namespace rcoll
