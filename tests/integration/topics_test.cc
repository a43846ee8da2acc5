// Topics (schema 20, issue 40): groups with their own part counts and
// assignors each acknowledge every published item once, each key in
// order; a group that subscribes receives exactly what is published after
// its subscription committed; a rolled-back publish reaches no group; a
// publish retried after a cut COMMIT adds nothing; bad input is refused
// in a sentence and changes nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <future>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "support/consumer_fixture.h"

namespace sqlgroup {
namespace {

using ::testing::HasSubstr;
using testing::WaitFor;

constexpr char kTopic[] = "orders";

class TopicsTest : public testing::ConsumerFixture {
 protected:
  void SetUp() override {
    ConsumerFixture::SetUp();
    ASSERT_TRUE(admin_->CreateTopic(kTopic).ok());
    pqxx::work tx(*conn_);
    // In the order the acknowledgements commit, per group.
    tx.exec(
        "CREATE TABLE topic_acks (n bigserial, grp text, id uuid, key text, "
        "payload text)");
    tx.exec(absl::StrCat("GRANT INSERT, SELECT ON topic_acks TO ",
                         testing::kMemberRole));
    tx.exec(absl::StrCat("GRANT USAGE ON SEQUENCE topic_acks_n_seq TO ",
                         testing::kMemberRole));
    tx.commit();
  }

  void CreateSubscriber(const std::string& name, int parts,
                        const std::string& assignor) {
    ASSERT_TRUE(
        admin_
            ->CreateGroup({.name = name,
                           .parts = parts,
                           .session_ttl = absl::Seconds(2),
                           .heartbeat_interval = absl::Milliseconds(400),
                           .assignor = assignor,
                           .topic = kTopic})
            .ok());
  }

  Handler AckRecorder(const std::string& group) {
    return [group](const Item& item, AckTransaction& ack) {
      ack.work().exec_params(
          "INSERT INTO topic_acks (grp, id, key, payload) "
          "VALUES ($1, $2::uuid, $3, $4)",
          group, item.id, item.key, item.payload);
      return absl::OkStatus();
    };
  }

  // Publishes items [first, end) of a sequence over kKeys keys, item i
  // with key k(i mod kKeys) and payload "KEY:N" (N: its number among the
  // key's items), in batches of 50 through a topic Producer.
  static constexpr int kKeys = 24;
  std::vector<std::string> PublishNumbered(int first, int end) {
    auto producer = Producer::Create({.dsn = db_.dsn(), .topic = kTopic});
    EXPECT_TRUE(producer.ok()) << producer.status();
    if (!producer.ok()) return {};
    std::vector<std::string> ids;
    for (int sent = first; sent < end; sent += 50) {
      std::vector<NewItem> items;
      for (int i = sent; i < std::min(end, sent + 50); ++i) {
        const std::string key = absl::StrCat("k", i % kKeys);
        items.push_back(
            {.key = key, .payload = absl::StrCat(key, ":", i / kKeys)});
      }
      auto got = (*producer)->Enqueue(items);
      EXPECT_TRUE(got.ok()) << got.status();
      if (got.ok()) ids.insert(ids.end(), got->begin(), got->end());
    }
    return ids;
  }

  std::set<std::string> ItemIds(const std::string& group) {
    pqxx::nontransaction tx(*conn_);
    std::set<std::string> ids;
    for (const auto& row : tx.exec_params(
             "SELECT id::text FROM sqlgroup.items WHERE group_name = $1",
             group)) {
      ids.insert(row[0].as<std::string>());
    }
    return ids;
  }

  std::vector<std::string> Publish(pqxx::work& tx, int n) {
    std::vector<std::string> ids;
    for (int i = 0; i < n; ++i) {
      ids.push_back(tx.exec_params1("SELECT sqlgroup.publish($1, $2, $3)::text",
                                    kTopic, absl::StrCat("k", i),
                                    pqxx::binarystring(std::string("p")))[0]
                        .as<std::string>());
    }
    return ids;
  }
};

TEST_F(TopicsTest, EachGroupAcknowledgesEveryItemOnceInKeyOrder) {
  CreateSubscriber("billing", 4, "lexical");
  CreateSubscriber("email", 16, "sticky");
  std::vector<std::string> ids = PublishNumbered(0, 300);
  std::vector<std::unique_ptr<Consumer>> members;
  for (const char* group : {"billing", "email"}) {
    for (int i = 0; i < 2; ++i) {
      members.push_back(Start(Options(group, AckRecorder(group))));
      ASSERT_NE(members.back(), nullptr);
    }
  }
  // As many again while they run.
  const std::vector<std::string> more = PublishNumbered(300, 600);
  ids.insert(ids.end(), more.begin(), more.end());
  ASSERT_EQ(ids.size(), 600u);
  ASSERT_TRUE(Drained(absl::Seconds(60)));
  for (auto& m : members) m->Stop();

  const std::set<std::string> published(ids.begin(), ids.end());
  for (const char* group : {"billing", "email"}) {
    SCOPED_TRACE(group);
    pqxx::nontransaction tx(*conn_);
    EXPECT_EQ(tx.exec_params1("SELECT count(*) FROM topic_acks WHERE grp = $1",
                              group)[0]
                  .as<int64_t>(),
              600);
    std::set<std::string> acked;
    std::map<std::string, int> next;  // per key: the payload expected next
    for (const auto& row : tx.exec_params(
             "SELECT id::text, key, payload FROM topic_acks WHERE grp = $1 "
             "ORDER BY n",
             group)) {
      acked.insert(row[0].as<std::string>());
      const std::string key = row[1].as<std::string>();
      EXPECT_EQ(row[2].as<std::string>(), absl::StrCat(key, ":", next[key]++))
          << "out of order";
    }
    EXPECT_EQ(acked, published);
  }
  // The topic's count, for the metrics.
  EXPECT_EQ(Count("SELECT sqlgroup.topic_published('orders')"), 600);
}

TEST_F(TopicsTest, APausedOrFailingGroupNeverHoldsUpAnother) {
  CreateSubscriber("fast", 4, "lexical");
  CreateSubscriber("paused", 4, "lexical");
  CreateSubscriber("failing", 8, "sticky");
  ASSERT_TRUE(admin_->PauseGroup("paused").ok());
  auto fast = Start(Options("fast", AckRecorder("fast")));
  auto failing = Start(Options("failing", [](const Item&, AckTransaction&) {
    return absl::UnavailableError("the mail server is down");
  }));
  ASSERT_NE(fast, nullptr);
  ASSERT_NE(failing, nullptr);
  PublishNumbered(0, 200);
  EXPECT_TRUE(WaitFor(
      [&] {
        return Count("SELECT count(*) FROM topic_acks WHERE grp = 'fast'") ==
               200;
      },
      absl::Seconds(30)));
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.items "
                  "WHERE group_name = 'fast'"),
            0);
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.items "
                  "WHERE group_name = 'paused'"),
            200);
  // Every one of its copies failed or died: none acknowledged.
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.items "
                  "WHERE group_name = 'failing'") +
                Count("SELECT count(*) FROM sqlgroup.dead_items "
                      "WHERE group_name = 'failing'"),
            200);
  fast->Stop();
  failing->Stop();
}

TEST_F(TopicsTest, AGroupGetsExactlyWhatIsPublishedAfterItSubscribed) {
  CreateSubscriber("early", 4, "lexical");
  ASSERT_TRUE(admin_->CreateGroup({.name = "late", .parts = 8}).ok());
  // A publish in flight when the subscription is asked for: the
  // subscription waits for it, so its items are not the late group's.
  pqxx::connection publisher(db_.dsn());
  pqxx::work in_flight(publisher);
  const std::vector<std::string> before = Publish(in_flight, 5);
  auto subscribed = std::async(std::launch::async, [&] {
    auto admin = Admin::Connect({.dsn = db_.dsn()});
    if (!admin.ok()) return absl::StatusOr<bool>(admin.status());
    return (*admin)->SetGroupTopic("late", std::string(kTopic));
  });
  // Waiting for the topic's lock, which the publish in flight holds.
  const auto waiting_for_topic = [&](int n) {
    return WaitFor(
        [&] {
          return Count(
                     "SELECT count(*) FROM pg_locks l JOIN pg_database d "
                     "ON d.oid = l.database WHERE d.datname = "
                     "current_database() AND l.locktype = 'advisory' "
                     "AND NOT l.granted") == n;
        },
        absl::Seconds(20));
  };
  EXPECT_TRUE(waiting_for_topic(1))
      << "the subscription did not wait for the publish in flight";
  EXPECT_EQ(subscribed.wait_for(std::chrono::milliseconds(0)),
            std::future_status::timeout);
  // A publish that starts while the subscription waits queues behind it,
  // and so reaches the late group too.
  auto queued = std::async(std::launch::async, [&] {
    pqxx::connection c(db_.dsn());
    pqxx::work tx(c);
    std::vector<std::string> ids = Publish(tx, 2);
    tx.commit();
    return ids;
  });
  EXPECT_TRUE(waiting_for_topic(2))
      << "a publish overtook the waiting subscription";
  in_flight.commit();
  auto changed = subscribed.get();
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);

  pqxx::work after_tx(publisher);
  std::vector<std::string> after = Publish(after_tx, 7);
  after_tx.commit();
  for (const std::string& id : queued.get()) after.push_back(id);

  std::set<std::string> all(before.begin(), before.end());
  all.insert(after.begin(), after.end());
  EXPECT_EQ(ItemIds("early"), all);
  EXPECT_EQ(ItemIds("late"), std::set<std::string>(after.begin(), after.end()));

  // Ending it: what follows reaches the early group only; the late one
  // keeps what it holds.
  ASSERT_TRUE(admin_->SetGroupTopic("late", std::nullopt).ok());
  pqxx::work last(publisher);
  Publish(last, 3);
  last.commit();
  EXPECT_EQ(ItemIds("early").size(), 17u);
  EXPECT_EQ(ItemIds("late").size(), 9u);
}

TEST_F(TopicsTest, ARolledBackPublishReachesNoGroup) {
  CreateSubscriber("a", 4, "lexical");
  CreateSubscriber("b", 16, "sticky");
  {
    pqxx::work tx(*conn_);
    EXPECT_EQ(Publish(tx, 10).size(), 10u);
    tx.abort();
  }
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.items"), 0);
  pqxx::work tx(*conn_);
  Publish(tx, 4);
  tx.commit();
  EXPECT_EQ(ItemIds("a"), ItemIds("b"));
  EXPECT_EQ(ItemIds("a").size(), 4u);
}

TEST_F(TopicsTest, APublishUnderAnOlderSnapshotThanASubscriptionFails) {
  CreateSubscriber("a", 4, "lexical");
  ASSERT_TRUE(admin_->CreateGroup({.name = "b", .parts = 4}).ok());
  pqxx::connection publisher(db_.dsn());
  pqxx::work tx(publisher);
  tx.exec("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ");
  tx.exec("SELECT 1");  // the snapshot: b reads no topic
  ASSERT_TRUE(admin_->SetGroupTopic("b", std::string(kTopic)).ok());
  try {
    Publish(tx, 1);
    ADD_FAILURE() << "published under a snapshot that misses group b";
  } catch (const pqxx::serialization_failure& e) {
    SUCCEED() << e.what();  // the client retries it, with a new snapshot
  }
}

TEST_F(TopicsTest, IdempotentPublishReturnsTheFirstIdsAndAddsNothing) {
  CreateSubscriber("a", 4, "lexical");
  CreateSubscriber("b", 8, "lexical");
  const auto publish = [&](const std::string& payload) {
    pqxx::work tx(*conn_);
    std::vector<std::string> ids;
    for (const auto& row :
         tx.exec_params("SELECT id::text FROM sqlgroup.publish_many($1, "
                        "ARRAY['k', NULL], ARRAY[$2::bytea, 'x'::bytea], "
                        "'0', 'request-7') AS id",
                        kTopic, pqxx::binarystring(payload))) {
      ids.push_back(row[0].as<std::string>());
    }
    tx.commit();
    return ids;
  };
  const std::vector<std::string> first = publish("p");
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(publish("p"), first);
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.items"), 4);
  try {
    publish("other");
    ADD_FAILURE() << "other items under a key already used were accepted";
  } catch (const pqxx::sql_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("was used at"));
  }
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.items"), 4);
  // A retry is answered after the groups stopped reading the topic too.
  ASSERT_TRUE(admin_->SetGroupTopic("a", std::nullopt).ok());
  ASSERT_TRUE(admin_->SetGroupTopic("b", std::nullopt).ok());
  EXPECT_EQ(publish("p"), first);
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.items"), 4);
}

TEST_F(TopicsTest, AProducerBatchWhoseCommitWasCutIsPublishedOnce) {
  CreateSubscriber("a", 4, "lexical");
  CreateSubscriber("b", 16, "sticky");
  // A COMMIT durable here but waiting for a standby that does not exist:
  // cut there, its client cannot know it committed (producer_test.cc).
  pqxx::nontransaction(*conn_).exec(
      absl::StrCat("ALTER DATABASE ", conn_->quote_name(db_.name()),
                   " SET synchronous_commit = on"));
  const auto sync_wait = [&](bool on) {
    pqxx::nontransaction tx(*conn_);
    tx.exec(on ? "ALTER SYSTEM SET synchronous_standby_names = 'nobody'"
               : "ALTER SYSTEM RESET synchronous_standby_names");
    tx.exec("SELECT pg_reload_conf()");
  };
  sync_wait(true);
  auto producer = Producer::Create(
      {.dsn = db_.dsn(), .topic = kTopic, .retry_for = absl::Seconds(60)});
  ASSERT_TRUE(producer.ok()) << producer.status();
  std::vector<NewItem> items;
  // Mixed delays: one call, one key for the whole batch.
  for (int i = 0; i < 20; ++i) {
    items.push_back({.key = absl::StrCat("k", i % 3),
                     .payload = absl::StrCat("item ", i),
                     .delay = absl::Milliseconds(i % 2 == 0 ? 0 : 1500)});
  }
  auto result = std::async(std::launch::async,
                           [&] { return (*producer)->Enqueue(items); });
  const std::string waiting =
      "FROM pg_stat_activity WHERE application_name = 'sqlgroup-producer' "
      "AND wait_event = 'SyncRep'";
  EXPECT_TRUE(WaitFor([&] { return Count("SELECT count(*) " + waiting) == 1; },
                      absl::Seconds(20)));
  EXPECT_EQ(Count("SELECT count(pg_terminate_backend(pid)) " + waiting), 1);
  // Committed here, though its client never heard so: visible once the
  // terminated backend has gone.
  EXPECT_TRUE(WaitFor(
      [&] { return Count("SELECT count(*) FROM sqlgroup.items") == 40; },
      absl::Seconds(10)));
  sync_wait(false);
  auto ids = result.get();
  pqxx::nontransaction(*conn_).exec(absl::StrCat("ALTER DATABASE ",
                                                 conn_->quote_name(db_.name()),
                                                 " RESET synchronous_commit"));
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_GE((*producer)->retries(), 1);
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.items"), 40);
  EXPECT_EQ(ItemIds("a"), std::set<std::string>(ids->begin(), ids->end()));
  EXPECT_EQ(ItemIds("b"), ItemIds("a"));
  // The delayed half, in both groups.
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.items "
                  "WHERE not_before > enqueued_at"),
            20);
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.publish_keys"), 1);
  producer->reset();  // its last key forgotten: nobody will retry it
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.publish_keys"), 0);
}

TEST_F(TopicsTest, PublishingIsGrantedPerTopicAndMembersStayInTheirGroup) {
  CreateSubscriber("a", 4, "lexical");
  CreateSubscriber("b", 4, "lexical");
  ASSERT_TRUE(admin_->CreateTopic("audit").ok());
  ASSERT_TRUE(admin_->CreateGroup({.name = "c", .topic = "audit"}).ok());
  testing::TestRole scoped, everywhere, member, op;
  ASSERT_TRUE(admin_
                  ->GrantRoles({.producer_role = scoped.name(),
                                .groups = {"a"},
                                .topics = {"ord*"}})
                  .ok());
  ASSERT_TRUE(admin_->GrantRoles({.producer_role = everywhere.name()}).ok());
  ASSERT_TRUE(admin_
                  ->GrantRoles({.member_role = member.name(),
                                .operator_role = op.name(),
                                .groups = {"a"}})
                  .ok());
  const auto publish = [&](const testing::TestRole& role,
                           const std::string& topic) -> absl::Status {
    auto p = Producer::Create(
        {.dsn = role.Dsn(db_.name()), .topic = topic, .retry_for = {}});
    if (!p.ok()) return p.status();
    return (*p)->Enqueue({{.key = "k", .payload = "x"}}).status();
  };
  EXPECT_TRUE(publish(scoped, kTopic).ok());
  const absl::Status refused = publish(scoped, "audit");
  EXPECT_TRUE(absl::IsPermissionDenied(refused)) << refused;
  EXPECT_THAT(refused.message(),
              HasSubstr(absl::StrCat(
                  "may not publish to topic audit; an owner "
                  "of the sqlgroup schema can allow it with "
                  "`sqlgroup grant --producer_role ",
                  scoped.name(), " --group a --topic ord* --topic audit`")));
  EXPECT_TRUE(publish(everywhere, "audit").ok());
  // A member of a reads a's copies only: b's are not its rows.
  pqxx::connection as_member(member.Dsn(db_.name()));
  pqxx::nontransaction tx(as_member);
  EXPECT_EQ(tx.exec1("SELECT count(*) FROM sqlgroup.items")[0].as<int64_t>(),
            1);
  EXPECT_EQ(tx.exec("DELETE FROM sqlgroup.items WHERE group_name = 'b'")
                .affected_rows(),
            0u);
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.items WHERE group_name = 'b'"),
            1);
  // An operator of a lists the topics, with the groups it may see.
  auto as_operator = Admin::Connect({.dsn = op.Dsn(db_.name())});
  ASSERT_TRUE(as_operator.ok()) << as_operator.status();
  auto topic = (*as_operator)->DescribeTopic(kTopic);
  ASSERT_TRUE(topic.ok()) << topic.status();
  ASSERT_EQ(topic->groups.size(), 1u);
  EXPECT_EQ(topic->groups[0].group, "a");
  EXPECT_EQ(topic->groups[0].waiting, 1);
  EXPECT_EQ(topic->published, 1);
}

TEST_F(TopicsTest, BadInputIsRefusedInASentenceAndChangesNothing) {
  CreateSubscriber("a", 4, "lexical");
  // Topics.
  absl::Status s = admin_->CreateTopic("bad name");
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("is invalid: use 1 to 128 letters"));
  s = admin_->CreateTopic(kTopic);
  EXPECT_TRUE(absl::IsAlreadyExists(s)) << s;
  s = admin_->DeleteTopic(kTopic);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("is read by group a; unsubscribe it"));
  s = admin_->DeleteTopic("nope");
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_TRUE(absl::IsNotFound(admin_->DescribeTopic("nope").status()));
  // Subscriptions.
  auto changed = admin_->SetGroupTopic("a", std::string(kTopic));
  EXPECT_TRUE(absl::IsAlreadyExists(changed.status())) << changed.status();
  EXPECT_THAT(changed.status().message(),
              HasSubstr("group a is already subscribed to topic orders"));
  ASSERT_TRUE(admin_->CreateTopic("other").ok());
  changed = admin_->SetGroupTopic("a", std::string("other"));
  EXPECT_TRUE(absl::IsFailedPrecondition(changed.status()));
  EXPECT_THAT(changed.status().message(), HasSubstr("a group reads one topic"));
  changed = admin_->SetGroupTopic("nope", std::string(kTopic));
  EXPECT_TRUE(absl::IsNotFound(changed.status())) << changed.status();
  s = admin_->CreateGroup({.name = "c", .topic = "nope"});
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_FALSE(admin_->GetGroup("c").ok()) << "created without its topic";
  // Publishing.
  auto both =
      Producer::Create({.dsn = db_.dsn(), .group = "a", .topic = kTopic});
  EXPECT_TRUE(absl::IsInvalidArgument(both.status())) << both.status();
  auto missing = Producer::Create({.dsn = db_.dsn(), .topic = "nope"});
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  auto unread = Producer::Create({.dsn = db_.dsn(), .topic = "other"});
  ASSERT_TRUE(unread.ok()) << unread.status();
  auto ids = (*unread)->Enqueue({{.payload = "x"}});
  EXPECT_TRUE(absl::IsFailedPrecondition(ids.status())) << ids.status();
  EXPECT_THAT(ids.status().message(), HasSubstr("no group reads topic other"));
  for (const char* sql :
       {"SELECT sqlgroup.publish(NULL, 'k', 'x')",
        "SELECT sqlgroup.publish('orders', 'k', NULL)",
        "SELECT sqlgroup.publish('orders', 'k', 'x', interval '-1 s')",
        "SELECT sqlgroup.publish_many('orders', ARRAY['k'], "
        "ARRAY['x', 'y']::bytea[])"}) {
    SCOPED_TRACE(sql);
    try {
      pqxx::work tx(*conn_);
      tx.exec(sql);
      tx.commit();
      ADD_FAILURE() << "accepted";
    } catch (const pqxx::sql_error& e) {
      EXPECT_THAT(e.what(), HasSubstr("nothing was published"));
    }
  }
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.items"), 0);
  // Deleting a subscribed group ends its subscription with it.
  ASSERT_TRUE(admin_->DeleteGroup("a").ok());
  EXPECT_TRUE(admin_->DeleteTopic(kTopic).ok());
}

}  // namespace
}  // namespace sqlgroup
