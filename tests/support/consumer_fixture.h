// A fixture for tests of members in one process (one Consumer each)
// against a private PostgreSQL: a migrated database, members connecting
// with least privilege, a `results` table for handlers to record acks in,
// and the waits and reads such tests share.
#ifndef SQLGROUP_TESTS_SUPPORT_CONSUMER_FIXTURE_H_
#define SQLGROUP_TESTS_SUPPORT_CONSUMER_FIXTURE_H_

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <pqxx/pqxx>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sqlgroup/admin.h"
#include "sqlgroup/assignor.h"
#include "sqlgroup/consumer.h"
#include "sqlgroup/producer.h"
#include "support/pg_fixture.h"
#include "support/wait.h"

namespace sqlgroup::testing {

class ConsumerFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    admin_ = testing::MigratedAdmin(db_.dsn());
    ASSERT_NE(admin_, nullptr);
    // Members run with least privilege, as in production.
    member_dsn_ = db_.MemberDsn();
    conn_ = std::make_unique<pqxx::connection>(db_.dsn());
    pqxx::work tx(*conn_);
    // No unique constraint: a double acknowledgement shows as a duplicate.
    tx.exec(
        "CREATE TABLE results (grp text, id uuid, part int, session "
        "uuid)");
    tx.exec(absl::StrCat("GRANT INSERT, SELECT ON results TO ",
                         testing::kMemberRole));
    tx.commit();
  }

  // Heartbeat every 400 ms.
  void CreateGroup(const std::string& name, int parts,
                   absl::Duration ttl = absl::Seconds(2)) {
    ASSERT_TRUE(
        admin_
            ->CreateGroup({.name = name,
                           .parts = parts,
                           .session_ttl = ttl,
                           .heartbeat_interval = absl::Milliseconds(400)})
            .ok());
  }

  // A handler that records each acknowledged item in `results`.
  Handler Recorder(const std::string& group) {
    return [group](const Item& item, AckTransaction& ack) {
      ack.work().exec_params(
          "INSERT INTO results (grp, id, part) VALUES ($1, $2::uuid, $3)",
          group, item.id, item.part);
      return absl::OkStatus();
    };
  }

  ConsumerOptions Options(const std::string& group, Handler handler) {
    ConsumerOptions o;
    o.dsn = member_dsn_;
    o.group = group;
    o.handler = std::move(handler);
    o.workers = 2;
    o.rebalance_poll = absl::Milliseconds(300);
    o.drain_timeout = absl::Seconds(2);
    // Fast dead letters (5 attempts, 100 ms doubling: 1.5 s), not the
    // defaults that ride out an hour's outage; a test that needs more
    // sets its own.
    o.max_attempts = 5;
    o.backoff_initial = absl::Milliseconds(100);
    return o;
  }

  std::unique_ptr<Consumer> Start(ConsumerOptions options) {
    auto c = Consumer::Create(std::move(options));
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return nullptr;
    EXPECT_TRUE((*c)->Start().ok());
    return std::move(*c);
  }

  void Produce(const std::string& group, int n) {
    auto p = Producer::Create({.dsn = db_.dsn(), .group = group});
    ASSERT_TRUE(p.ok()) << p.status();
    std::vector<NewItem> items(n);
    for (int i = 0; i < n; ++i) items[i].payload = std::to_string(i);
    ASSERT_TRUE((*p)->Enqueue(items).ok());
  }

  // Every item acknowledged or dead-lettered within `timeout`.
  bool Drained(absl::Duration timeout) {
    return WaitFor(
        [&] { return Count("SELECT count(*) FROM sqlgroup.items") == 0; },
        timeout);
  }

  // A table `acks` that handlers write each acknowledged item's payload
  // to, in the order they commit, which the member role may write.
  void CreateAcksTable() {
    pqxx::work tx(*conn_);
    tx.exec("CREATE TABLE acks (n bigserial, payload text)");
    tx.exec(
        absl::StrCat("GRANT INSERT, SELECT ON acks TO ", testing::kMemberRole));
    tx.exec(absl::StrCat("GRANT USAGE ON SEQUENCE acks_n_seq TO ",
                         testing::kMemberRole));
    tx.commit();
  }

  // The payloads of `key` ("key:n") in `acks`, in the order acknowledged.
  std::vector<std::string> AckOrder(const std::string& key) {
    pqxx::nontransaction tx(*conn_);
    std::vector<std::string> out;
    for (const auto& row :
         tx.exec_params("SELECT payload FROM acks WHERE payload LIKE $1 "
                        "ORDER BY n",
                        key + ":%")) {
      out.push_back(row[0].as<std::string>());
    }
    return out;
  }

  int64_t Count(const std::string& sql) {
    pqxx::nontransaction tx(*conn_);
    return tx.exec1(sql)[0].as<int64_t>();
  }

  // part -> (session, epoch) per session_parts.
  std::map<int, std::pair<std::string, int64_t>> Owners(
      const std::string& group) {
    pqxx::nontransaction tx(*conn_);
    std::map<int, std::pair<std::string, int64_t>> owners;
    for (const auto& row :
         tx.exec_params("SELECT part, session_id::text, epoch FROM "
                        "sqlgroup.session_parts WHERE group_name = $1",
                        group)) {
      owners[row[0].as<int>()] = {row[1].as<std::string>(),
                                  row[2].as<int64_t>()};
    }
    return owners;
  }

  // True when session_parts matches the lexical target of `members`.
  bool OwnedAsTargeted(const std::string& group, int parts,
                       const std::vector<Consumer*>& members) {
    std::vector<std::string> ids;
    for (Consumer* c : members) {
      if (c->session_id().empty()) return false;
      ids.push_back(c->session_id());
    }
    const Assignment a = LexicalRangeAssignor().Assign(ids, parts);
    const auto owners = Owners(group);
    if (static_cast<int>(owners.size()) != parts) return false;
    for (int p = 0; p < parts; ++p) {
      if (owners.at(p).first != a.sessions[a.owner[p]]) return false;
    }
    return true;
  }

  // Waits until the database shows every part owned as the lexical
  // assignment over exactly `members` says.
  bool Settles(const std::string& group, int parts,
               const std::vector<Consumer*>& members,
               absl::Duration timeout = absl::Seconds(10)) {
    return WaitFor([&] { return OwnedAsTargeted(group, parts, members); },
                   timeout);
  }

  // Makes `session` an hour overdue by the database clock, as if it had
  // stopped heartbeating long ago.
  void ExpireSession(const std::string& session) {
    pqxx::work tx(*conn_);
    tx.exec_params(
        "UPDATE sqlgroup.sessions SET heartbeated_at = "
        "heartbeated_at - interval '1 hour' WHERE id = $1::uuid",
        session);
    tx.commit();
  }

  std::string member_dsn_;
  TestDatabase db_;
  std::unique_ptr<Admin> admin_;
  std::unique_ptr<pqxx::connection> conn_;
};

}  // namespace sqlgroup::testing

#endif  // SQLGROUP_TESTS_SUPPORT_CONSUMER_FIXTURE_H_
