// The payloads a listener hears on sqlgroup's NOTIFY channel, for tests of
// what producers announce.
#ifndef SQLGROUP_TESTS_SUPPORT_NOTIFICATIONS_H_
#define SQLGROUP_TESTS_SUPPORT_NOTIFICATIONS_H_

#include <pqxx/pqxx>
#include <string>
#include <vector>

namespace sqlgroup::testing {

// LISTENs on channel "sqlgroup" on `listener` from construction.
class Announcements : public pqxx::notification_receiver {
 public:
  explicit Announcements(pqxx::connection& listener);
  // Everything heard since the last call, in order: sends a marker through
  // `sender` (after every commit before this call) and collects up to it.
  std::vector<std::string> Heard(pqxx::connection& sender);

  void operator()(const std::string& payload, int) override;

 private:
  std::vector<std::string> payloads_;
  bool ended_ = false;
};

}  // namespace sqlgroup::testing

#endif  // SQLGROUP_TESTS_SUPPORT_NOTIFICATIONS_H_
