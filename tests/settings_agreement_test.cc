// The settings exchange's reductions and what a rank reads of them
// (runtime/settings_agreement.h): the verdict for everyone, the liveness
// addresses of its overlay partners with it, everyone's only on first use.
#include "runtime/settings_agreement.h"

#include <gtest/gtest.h>

#include "base/store_exchange.h"

namespace rcoll {
namespace {

std::vector<Bytes> values_of(const std::vector<std::pair<std::string, std::string>>& ranks) {
  std::vector<Bytes> out;
  for (const auto& [settings, address] : ranks) out.push_back(settings_value(settings, address));
  return out;
}

TEST(SettingsAgreement, AgreeingRanksGetAVerdictOfAFewBytesAndTheAddressesOnlyWhenAsked) {
  const std::string same = "algorithm=auto\nchunk_bytes=4194304";
  const auto values = values_of(
      {{same, "10.0.0.1 5000 eth0"}, {same, "10.0.0.2 5001 eth0"}, {same, "10.0.0.3 5002 eth0"}});
  const Bytes verdict = reduce_settings(values);
  EXPECT_LE(verdict.size(), 8u) << "no addresses in what every rank reads";
  EXPECT_TRUE(read_settings(verdict, 1, 3).ok());
  EXPECT_EQ(liveness_address(values[2]), "10.0.0.3 5002 eth0");
  PackedValues all;
  ASSERT_TRUE(PackedValues::decode(pack_liveness_addresses(values), 3, &all));
  EXPECT_EQ(all.at(1), "10.0.0.2 5001 eth0");
  // Rank 0 knows its partner's (rank 1, picked with the verdict); rank 2's
  // is read on first use, everyone's at once.
  int fetches = 0;
  AddressBook book = liveness_book(0, 3, "10.0.0.1 5000 eth0", {1}, {values[1]}, [&] {
    ++fetches;
    return Result<PackedValues>(all);
  });
  EXPECT_EQ(book.at(1).value(), "10.0.0.2 5001 eth0");
  EXPECT_EQ(book.at(0).value(), "10.0.0.1 5000 eth0");
  EXPECT_EQ(fetches, 0);
  EXPECT_EQ(book.at(2).value(), "10.0.0.3 5002 eth0");
  EXPECT_EQ(fetches, 1);
}

TEST(SettingsAgreement, TheFirstRankThatDiffersIsNamedWithTheSettingThatDiffers) {
  const auto values = values_of({{"algorithm=auto\nchunk_bytes=4194304", "a"},
                                 {"algorithm=auto\nchunk_bytes=4194304", "b"},
                                 {"algorithm=ring\nchunk_bytes=4194304", "c"},
                                 {"algorithm=ring\nchunk_bytes=4194304", "d"}});
  const Status s = read_settings(reduce_settings(values), 0, 4);
  ASSERT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(s.context().peer, 2);
  EXPECT_NE(s.message().find("algorithm is auto on rank 0 but ring on rank 2"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("2 of 4 ranks differ"), std::string::npos) << s.message();
}

TEST(SettingsAgreement, AValueWithoutAnAddressAndAVerdictThatDoesNotDecodeAreRefused) {
  std::vector<Bytes> values = values_of({{"x=1", "a"}, {"x=1", "b"}});
  const std::string old_build = "x=1";
  values[1] = Bytes(old_build.begin(), old_build.end());
  const Status s = read_settings(reduce_settings(values), 0, 2);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(s.context().peer, 1);
  EXPECT_EQ(read_settings(Bytes{}, 0, 2).code(), ErrorCode::kStore);
  EXPECT_EQ(read_settings(Bytes{'V', 9, '1'}, 0, 2).code(), ErrorCode::kStore);
  // An older build's combiner wrote the verdict as the first of two values.
  const Status old = read_settings(encode_values({Bytes{0, '-', '1', ' '}, Bytes{}}), 0, 2);
  EXPECT_EQ(old.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(old.message().find("another rcoll build"), std::string::npos) << old.message();
}

}  // namespace
}  // namespace rcoll
