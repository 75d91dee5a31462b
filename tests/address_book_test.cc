// The addresses a mesh knows up front and those it reads on first use
// (base/address_book.h).
#include "base/address_book.h"

#include <gtest/gtest.h>

namespace rcoll {
namespace {

TEST(AddressBook, PartnersAreKnownAndEveryOtherRankIsFetchedOnceAllTogether) {
  int fetches = 0;
  AddressBook book(5, {{3, "10.0.0.3 4003 eth0"}, {1, "10.0.0.1 4001 eth0"}}, [&] {
    ++fetches;
    return Result<PackedValues>(PackedValues({"a0", "a1", "a2", "a3", "a4"}));
  });
  EXPECT_EQ(book.peek(1), "10.0.0.1 4001 eth0");
  EXPECT_EQ(book.peek(2), "");
  EXPECT_EQ(book.at(3).value(), "10.0.0.3 4003 eth0");
  EXPECT_EQ(book.at(1).value(), "10.0.0.1 4001 eth0");
  EXPECT_EQ(book.peek(4), "") << "peek never asks the store";
  EXPECT_EQ(fetches, 0);
  EXPECT_EQ(book.at(4).value(), "a4");
  EXPECT_EQ(book.at(0).value(), "a0");
  EXPECT_EQ(fetches, 1) << "every rank's at once, then no more";
  EXPECT_EQ(book.peek(2), "a2");
}

// A rank that dials a few others reads each alone (a few dozen bytes); one
// that dials many (an all-to-all) reads everyone's at once after kOneByOne.
TEST(AddressBook, TheFirstFewAreReadOneByOneThenEveryoneAtOnce) {
  constexpr int kRanks = 100;
  std::vector<std::string> all;
  for (int q = 0; q < kRanks; ++q) all.push_back("a" + std::to_string(q));
  int ones = 0, alls = 0;
  AddressBook book(
      kRanks, {{0, "a0"}},
      [&] {
        ++alls;
        return Result<PackedValues>(PackedValues(all));
      },
      [&](int q) {
        ++ones;
        return Result<std::string>("a" + std::to_string(q));
      });
  for (int q = 1; q <= AddressBook::kOneByOne; ++q) EXPECT_EQ(book.at(q).value(), all[q]);
  EXPECT_EQ(book.at(3).value(), "a3") << "read once, then known";
  EXPECT_EQ(ones, AddressBook::kOneByOne);
  EXPECT_EQ(alls, 0);
  EXPECT_EQ(book.at(99).value(), "a99");
  EXPECT_EQ(book.at(50).value(), "a50");
  EXPECT_EQ(ones, AddressBook::kOneByOne);
  EXPECT_EQ(alls, 1);
  // Without everyone's to fall back on, every one is read alone.
  int singly = 0;
  AddressBook singles(kRanks, {}, nullptr, [&](int q) {
    ++singly;
    return Result<std::string>(all[q]);
  });
  for (int q = 0; q < kRanks; ++q) EXPECT_EQ(singles.at(q).value(), all[q]);
  EXPECT_EQ(singly, kRanks);
}

TEST(AddressBook, AFailedFetchIsTheCallersErrorAndIsTriedAgain) {
  int fetches = 0;
  AddressBook book(3, {{0, "x"}}, [&]() -> Result<PackedValues> {
    if (++fetches == 1) return Status(ErrorCode::kStore, "the store did not answer");
    return PackedValues({"x", "y", "z"});
  });
  auto first = book.at(2);
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.status().code(), ErrorCode::kStore);
  EXPECT_EQ(book.at(2).value(), "z");
  EXPECT_EQ(fetches, 2);
}

TEST(AddressBook, RanksOutsideTheMeshAndBooksWithoutAFetchAreRefused) {
  AddressBook book(2, {{0, "x"}}, nullptr);
  EXPECT_EQ(book.at(2).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(book.at(-1).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(book.at(1).status().code(), ErrorCode::kInternal);
  // A fetch of the wrong size is the store's (another program's keys).
  AddressBook wrong(3, {}, [] { return Result<PackedValues>(PackedValues({"only one"})); });
  EXPECT_EQ(wrong.at(1).status().code(), ErrorCode::kStore);
  // Given whole: everything known.
  AddressBook whole(PackedValues({"p", "q"}));
  EXPECT_EQ(whole.peek(1), "q");
  EXPECT_EQ(whole.at(1).value(), "q");
}

}  // namespace
}  // namespace rcoll
