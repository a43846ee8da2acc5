// An in-memory MembershipStore for unit tests of the member runtime: one
// group's sessions and part owners, with the conditional writes the real
// statements make (a take only of free parts, a drop only of one's own),
// and a way to make the next statement of a kind fail. Its statements lock
// `mu`; a test that changes the fields while a member runs holds it too.
#ifndef SQLGROUP_TESTS_SUPPORT_FAKE_MEMBERSHIP_STORE_H_
#define SQLGROUP_TESTS_SUPPORT_FAKE_MEMBERSHIP_STORE_H_

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "store/membership_store.h"

namespace sqlgroup::testing {

class FakeMembershipStore : public store::MembershipStore {
 public:
  explicit FakeMembershipStore(int parts) { settings.parts = parts; }

  // The group as `session` reads it.
  store::GroupView View(const std::string& session) const {
    std::lock_guard<std::mutex> lock(mu);
    store::GroupView view;
    view.settings = settings;
    view.live_sessions = {live.begin(), live.end()};
    view.membership = std::to_string(live.size());
    for (const auto& [part, owner] : owners) {
      if (owner.session == session) {
        view.ownership.mine[part] = owner.epoch;
      } else {
        view.ownership.others.push_back(part);
        view.ownership.owner_of[part] = owner.session;
      }
    }
    return view;
  }
  std::vector<int> PartsOf(const std::string& session) const {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<int> parts;
    for (const auto& [part, owner] : owners) {
      if (owner.session == session) parts.push_back(part);
    }
    return parts;
  }

  absl::StatusOr<store::GroupSettings> ReadGroup(const std::string&) override {
    std::lock_guard<std::mutex> lock(mu);
    return settings;
  }
  absl::StatusOr<store::Registered> RegisterSession(
      const std::string&, const store::SessionInfo& info, bool) override {
    std::lock_guard<std::mutex> lock(mu);
    if (!fail_register.ok()) return fail_register;
    registered_infos.push_back(info);
    const std::string id = "s" + std::to_string(++registered);
    live.insert(id);
    return store::Registered{id, false};
  }
  absl::StatusOr<std::optional<std::string>> StaticHolder(
      const std::string&, const std::string&) override {
    std::lock_guard<std::mutex> lock(mu);
    return std::nullopt;
  }
  absl::StatusOr<std::optional<store::Beat>> Heartbeat(
      const std::string& session, bool) override {
    std::lock_guard<std::mutex> lock(mu);
    if (!live.count(session)) return std::nullopt;
    store::Beat beat;
    beat.settings = settings;
    beat.membership = std::to_string(live.size());
    return beat;
  }
  absl::StatusOr<std::vector<std::string>> ReapExpired(const std::string&, bool,
                                                       absl::Time) override {
    std::lock_guard<std::mutex> lock(mu);
    return std::vector<std::string>{};
  }
  absl::StatusOr<store::GroupView> ReadGroupView(
      const std::string&, const std::string& session) override {
    return View(session);  // which locks
  }
  absl::StatusOr<std::vector<store::Owner>> TakeParts(
      const std::string&, const std::string& session,
      const std::vector<int>& parts, int parts_of) override {
    std::lock_guard<std::mutex> lock(mu);
    if (!fail_take.ok()) return Consume(fail_take);
    takes_under.push_back(parts_of);
    std::vector<store::Owner> taken;
    if (!live.count(session) || parts_of != settings.parts) return taken;
    for (int part : parts) {
      if (owners.count(part)) continue;
      owners[part] = {part, session, ++epoch};
      taken.push_back(owners[part]);
    }
    return taken;
  }
  absl::StatusOr<std::vector<int>> DropParts(
      const std::string&, const std::string& session,
      const std::vector<int>& parts, int, bool,
      const std::vector<std::string>&) override {
    std::lock_guard<std::mutex> lock(mu);
    if (!fail_drop.ok()) return Consume(fail_drop);
    std::vector<int> dropped;
    for (int part : parts) {
      auto it = owners.find(part);
      if (it == owners.end() || it->second.session != session) continue;
      owners.erase(it);
      revoking.erase(part);
      dropped.push_back(part);
    }
    return dropped;
  }
  absl::Status MarkRevoking(const std::string&, const std::string&,
                            const std::vector<int>& parts, int,
                            bool is_revoking) override {
    std::lock_guard<std::mutex> lock(mu);
    for (int part : parts) {
      if (is_revoking) {
        revoking.insert(part);
      } else {
        revoking.erase(part);
      }
    }
    return absl::OkStatus();
  }
  absl::Status ReportConnections(const std::string& session, int held,
                                 int budget) override {
    std::lock_guard<std::mutex> lock(mu);
    if (!fail_report.ok()) return fail_report;
    reports.push_back({session, held, budget});
    return absl::OkStatus();
  }
  absl::Status StepAway(const std::string&, const std::string&, bool) override {
    std::lock_guard<std::mutex> lock(mu);
    return absl::OkStatus();
  }
  absl::Status LeaveSession(const std::string&, const std::string& session,
                            bool) override {
    std::lock_guard<std::mutex> lock(mu);
    live.erase(session);
    for (auto it = owners.begin(); it != owners.end();) {
      it = it->second.session == session ? owners.erase(it) : std::next(it);
    }
    return absl::OkStatus();
  }
  absl::StatusOr<int64_t> PruneOwnershipLog(const std::string&, absl::Duration,
                                            int) override {
    std::lock_guard<std::mutex> lock(mu);
    return 0;
  }
  absl::StatusOr<internal::SchemaState> ReadSchema() override {
    std::lock_guard<std::mutex> lock(mu);
    ++schema_reads;
    if (!fail_schema_read.ok()) return Consume(fail_schema_read);
    return schema;
  }
  absl::Status RecordVersion(const std::string& session) override {
    std::lock_guard<std::mutex> lock(mu);
    if (!fail_record_version.ok()) return fail_record_version;
    versions_recorded.insert(session);
    return absl::OkStatus();
  }

  mutable std::mutex mu;
  store::GroupSettings settings;
  std::set<std::string> live;
  internal::SchemaState schema{kSchemaVersion, kSchemaVersion};
  std::set<std::string> versions_recorded;  // RecordVersion's sessions
  int schema_reads = 0;
  absl::Status fail_schema_read;     // the next read fails with it
  absl::Status fail_record_version;  // every RecordVersion fails with it
  struct Report {
    std::string session;
    int held = 0;
    int budget = 0;
  };
  std::vector<Report> reports;  // ReportConnections's, in order
  absl::Status fail_report;     // every report fails with it
  std::vector<store::SessionInfo> registered_infos;  // each registration's
  absl::Status fail_register;  // every registration fails with it
  std::map<int, store::Owner> owners;
  std::set<int> revoking;        // marked for describe
  std::vector<int> takes_under;  // each take's parts_of
  absl::Status fail_take;        // the next take fails with it
  absl::Status fail_drop;        // the next drop fails with it
  int64_t epoch = 0;
  int registered = 0;

 private:
  static absl::Status Consume(absl::Status& s) {
    absl::Status out = s;
    s = absl::OkStatus();
    return out;
  }
};

}  // namespace sqlgroup::testing

#endif  // SQLGROUP_TESTS_SUPPORT_FAKE_MEMBERSHIP_STORE_H_
