// The NOTIFY payloads that announce items (store/member_store.h): what a
// producer says and what a member reads from it, with no database.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "keyspace.h"
#include "store/member_store.h"

namespace sqlgroup::store {
namespace {

TEST(Announcements, NameTheDistinctPrefixesOfTheIdsInOrder) {
  EXPECT_EQ(ItemsArrivedIn("g", {"ff00aaaa-0000-4000-8000-000000000000",
                                 "0a1b0000-0000-4000-8000-000000000000",
                                 "ff00bbbb-0000-4000-8000-000000000000"}),
            "items:g#0a1b,ff00");
}

TEST(Announcements, TooManyPrefixesAnnouncePlainly) {
  std::vector<std::string> ids;
  for (size_t i = 0; i <= kMaxAnnouncedPrefixes; ++i) {
    ids.push_back(FormatUuid(Uuid128(i) << 112));
  }
  EXPECT_EQ(ItemsArrivedIn("g", ids), ItemsArrived("g"));
  ids.pop_back();
  EXPECT_NE(ItemsArrivedIn("g", ids), ItemsArrived("g"));
}

TEST(Announcements, AMemberReadsTheKeyRangesOfThePrefixes) {
  const auto ranges = ParseItemsArrivedIn("g", "items:g#0a1b,FFFF");
  ASSERT_TRUE(ranges.has_value());
  ASSERT_EQ(ranges->size(), 2u);
  const Uuid128 low = Uuid128(0x0a1b) << 112;
  EXPECT_EQ((*ranges)[0].first, low);
  EXPECT_EQ((*ranges)[0].last, low + (Uuid128(1) << 112) - 1);
  EXPECT_EQ((*ranges)[1].last, ~Uuid128(0));
  // Every id of the announcement lies in its ranges.
  const std::string id = "0a1b2c3d-0000-4000-8000-000000000001";
  const auto back = ParseItemsArrivedIn("g", ItemsArrivedIn("g", {id}));
  ASSERT_TRUE(back.has_value());
  ASSERT_EQ(back->size(), 1u);
  EXPECT_LE((*back)[0].first, *ParseUuid(id));
  EXPECT_GE((*back)[0].last, *ParseUuid(id));
}

TEST(Announcements, OtherPayloadsAreNotTargetedAnnouncements) {
  for (const std::string payload :
       {"items:g", "items:g@2500000", "items:gg#0a1b", "items:g#",
        "items:g#0a1", "items:g#0a1b,", "items:g#0x1b", "items:g#+a1b",
        "items:g#0a1b0", "rebalance:g", "items:h#0a1b"}) {
    EXPECT_FALSE(ParseItemsArrivedIn("g", payload).has_value()) << payload;
  }
}

}  // namespace
}  // namespace sqlgroup::store
