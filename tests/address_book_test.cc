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
  EXPECT_TRUE(book.knows(1));
  EXPECT_FALSE(book.knows(2));
  EXPECT_EQ(book.at(3).value(), "10.0.0.3 4003 eth0");
  EXPECT_EQ(book.at(1).value(), "10.0.0.1 4001 eth0");
  EXPECT_EQ(book.peek(4), "") << "peek never asks the store";
  EXPECT_EQ(fetches, 0);
  EXPECT_EQ(book.at(4).value(), "a4");
  EXPECT_EQ(book.at(0).value(), "a0");
  EXPECT_EQ(fetches, 1) << "every rank's at once, then no more";
  EXPECT_TRUE(book.knows(2));
  EXPECT_EQ(book.peek(2), "a2");
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
  EXPECT_TRUE(whole.knows(1));
  EXPECT_EQ(whole.at(1).value(), "q");
}

}  // namespace
}  // namespace rcoll
