#include "support/notifications.h"

#include <gtest/gtest.h>

#include "absl/time/clock.h"
#include "store/member_store.h"

namespace sqlgroup::testing {
namespace {
constexpr char kEnd[] = "end of test announcements";
}  // namespace

Announcements::Announcements(pqxx::connection& listener)
    : pqxx::notification_receiver(listener, store::kChannel) {}

void Announcements::operator()(const std::string& payload, int) {
  if (payload == kEnd) {
    ended_ = true;
  } else {
    payloads_.push_back(payload);
  }
}

std::vector<std::string> Announcements::Heard(pqxx::connection& sender) {
  {
    pqxx::work tx(sender);
    tx.exec_params("SELECT pg_notify($1, $2)", store::kChannel, kEnd);
    tx.commit();
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!ended_ && absl::Now() < deadline) {
    conn().await_notification(1, 0);
  }
  EXPECT_TRUE(ended_) << "no notification arrived";
  std::vector<std::string> heard = std::move(payloads_);
  payloads_.clear();
  ended_ = false;
  return heard;
}

}  // namespace sqlgroup::testing
