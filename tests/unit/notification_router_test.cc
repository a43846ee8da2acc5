// What a member does with each NOTIFY payload it hears, with no database.
#include "member/notification_router.h"

#include <gtest/gtest.h>

#include "store/notifications.h"

namespace sqlgroup {
namespace {

struct Heard {
  int membership = 0;
  int anywhere = 0;
  std::vector<KeyRange> ranges;
  std::vector<absl::Duration> due;
  int schema = 0;
};

NotificationRouter RouterFor(const std::string& group, Heard& heard) {
  return NotificationRouter(
      group, {.membership_changed = [&] { ++heard.membership; },
              .items_arrived = [&] { ++heard.anywhere; },
              .items_arrived_in =
                  [&](const std::vector<KeyRange>& r) {
                    heard.ranges.insert(heard.ranges.end(), r.begin(), r.end());
                  },
              .items_due_in = [&](absl::Duration d) { heard.due.push_back(d); },
              .schema_changed = [&] { ++heard.schema; }});
}

TEST(NotificationRouter, AMembershipChangeOrAFreedPartRebalances) {
  Heard heard;
  const NotificationRouter router = RouterFor("g", heard);
  router.Route(store::MembershipChanged("g"));
  router.Route(store::kPartsFreed);
  EXPECT_EQ(heard.membership, 2);
  EXPECT_EQ(heard.anywhere, 0);
}

TEST(NotificationRouter, AnotherGroupsPayloadsAreIgnored) {
  Heard heard;
  const NotificationRouter router = RouterFor("g", heard);
  router.Route(store::MembershipChanged("h"));
  router.Route(store::ItemsArrived("h"));
  router.Route(store::ItemsDueIn("h", absl::Seconds(1)));
  router.Route(store::ItemsArrived("g2"));
  EXPECT_EQ(heard.membership + heard.anywhere, 0);
  EXPECT_TRUE(heard.due.empty());
}

TEST(NotificationRouter, ItemsAreRoutedByWhereAndWhenTheyCome) {
  Heard heard;
  const NotificationRouter router = RouterFor("g", heard);
  router.Route(store::ItemsArrived("g"));
  router.Route(store::ItemsDueIn("g", absl::Milliseconds(1500)));
  router.Route(
      store::ItemsArrivedIn("g", {"0a1b0000-0000-4000-8000-000000000000"}));
  EXPECT_EQ(heard.anywhere, 1);
  ASSERT_EQ(heard.due.size(), 1u);
  EXPECT_EQ(heard.due[0], absl::Milliseconds(1500));
  ASSERT_EQ(heard.ranges.size(), 1u);
  EXPECT_EQ(heard.ranges[0].first, Uuid128(0x0a1b) << 112);
}

TEST(NotificationRouter, ANewerProducersFormStillWakesIdleParts) {
  Heard heard;
  const NotificationRouter router = RouterFor("g", heard);
  router.Route("items:g#not-a-prefix-list");
  EXPECT_EQ(heard.anywhere, 1);
  EXPECT_TRUE(heard.ranges.empty());
}

// `sqlgroup migrate` tells every member of every group; a router without
// a schema sink (an older wiring) ignores it.
TEST(NotificationRouter, ASchemaChangeReachesEveryGroup) {
  Heard heard;
  RouterFor("g", heard).Route(store::SchemaChanged(15));
  RouterFor("h", heard).Route(store::SchemaChanged(16));
  EXPECT_EQ(heard.schema, 2);
  EXPECT_EQ(heard.membership + heard.anywhere, 0);
  NotificationRouter("g", {.membership_changed = [] {},
                           .items_arrived = [] {},
                           .items_arrived_in = [](const auto&) {},
                           .items_due_in = [](absl::Duration) {}})
      .Route(store::SchemaChanged(15));
}

}  // namespace
}  // namespace sqlgroup
