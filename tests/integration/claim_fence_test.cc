// The hot path's fences (schema 5): a claim is a read under a take, and
// every statement that settles an item (ack, release, dead-letter) is
// fenced on the take and on its session's liveness, holding the take so
// that a drop or a reap never interleaves with an ack. Also: the generic
// plans the workers run read items by index.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <future>
#include <pqxx/pqxx>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "keyspace.h"
#include "sqlgroup/admin.h"
#include "store/errors.h"
#include "store/function_ack.h"
#include "store/item_store.h"
#include "store/still_due.h"
#include "support/pg_fixture.h"

namespace sqlgroup {
namespace {

using ::testing::ContainsRegex;
using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::TestDatabase;

constexpr char kGroup[] = "g";
constexpr int kParts = 8;
constexpr char kSession[] = "aaaaaaaa-0000-4000-8000-000000000000";
// Two items of part 0 (keys 0x00.. to 0x1f..) and one of part 1.
constexpr char kFirst[] = "01000000-0000-4000-8000-000000000000";
constexpr char kSecond[] = "02000000-0000-4000-8000-000000000000";
constexpr char kOtherPart[] = "21000000-0000-4000-8000-000000000000";

constexpr char kHandlerFunctions[] = R"sql(
CREATE TABLE public.calls (call serial, id uuid, key text, payload bytea,
                           items int);
CREATE FUNCTION public.handle(k text, p bytea, i uuid) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.calls (id, key, payload, items) VALUES (i, k, p, 1);
  IF p = 'dead' THEN
    RAISE EXCEPTION 'item % cannot be handled', i USING ERRCODE = 'SGDLQ';
  ELSIF p = 'fail' THEN
    RAISE EXCEPTION 'try again later';
  END IF;
END $$;
CREATE FUNCTION public.handle_all(k text[], p bytea[], i uuid[])
RETURNS int LANGUAGE sql AS $$
  INSERT INTO public.calls (id, key, payload, items)
  SELECT u.id, u.key, u.payload, cardinality(i)
  FROM unnest(i, k, p) AS u(id, key, payload)
  RETURNING 1
$$;
CREATE FUNCTION public.handle_set(k text, p bytea, i uuid) RETURNS SETOF int
LANGUAGE sql AS $$ SELECT 1 $$;
CREATE FUNCTION public.handle_strict(k text, p bytea, i uuid) RETURNS void
LANGUAGE sql STRICT AS $$ INSERT INTO public.calls (id) VALUES (i) $$;
)sql";

class ClaimFenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto admin = testing::MigratedAdmin(db_.dsn());
    ASSERT_NE(admin, nullptr);
    ASSERT_TRUE(admin->CreateGroup({.name = kGroup, .parts = kParts}).ok());
    conn_ = std::make_unique<pqxx::connection>(db_.dsn());
    store::PrepareItemStatements(*conn_, /*pauses=*/true);
    pqxx::work tx(*conn_);
    tx.exec_params(
        "INSERT INTO sqlgroup.sessions (id, group_name, member_schema) "
        "VALUES ($1, $2, (SELECT max(version) FROM "
        "sqlgroup.schema_migrations))",
        kSession, kGroup);
    tx.exec_params(
        "INSERT INTO sqlgroup.items (group_name, id) VALUES ($1, $2), "
        "($1, $3), ($1, $4)",
        kGroup, kFirst, kSecond, kOtherPart);
    // SQL function handlers (SqlFunction): each call leaves a row; a
    // payload 'dead' raises SGDLQ, 'fail' another error.
    tx.exec(kHandlerFunctions);
    tx.commit();
    ref_ = Take(0);
  }

  store::ClaimRef Take(int part) {
    pqxx::work tx(*conn_);
    const int64_t epoch =
        tx.exec_params1(
              "INSERT INTO sqlgroup.session_parts (group_name, "
              "part, session_id, parts_of) SELECT $1, $2, $3, parts "
              "FROM sqlgroup.groups WHERE name = $1 RETURNING epoch",
              kGroup, part, kSession)[0]
            .as<int64_t>();
    tx.commit();
    return {kGroup, kSession, part, epoch};
  }

  void Drop(int part) {
    pqxx::work tx(*conn_);
    tx.exec_params("DELETE FROM sqlgroup.session_parts WHERE part = $1", part);
    tx.commit();
  }

  absl::StatusOr<std::vector<Item>> Claim(const store::ClaimRef& ref) {
    const KeyRange r = PartRange(ref.part, kParts);
    return store::ClaimItems(*conn_, ref, r.first, r.last, 10);
  }

  // The ids the SQL function handlers were called with, in call order.
  std::vector<std::string> Calls() {
    pqxx::nontransaction tx(*conn_);
    std::vector<std::string> ids;
    for (const pqxx::row& row :
         tx.exec("SELECT id::text FROM public.calls ORDER BY call")) {
      ids.push_back(row[0].as<std::string>());
    }
    return ids;
  }

  int64_t Count(const std::string& table) {
    pqxx::nontransaction tx(*conn_);
    return tx.exec1("SELECT count(*) FROM sqlgroup." + table)[0].as<int64_t>();
  }

  // A drop of part 0 waits for an ack in flight on another connection:
  // it runs out of its lock timeout, and the part stays.
  void ExpectADropOfPartZeroToWait() {
    pqxx::nontransaction dropper(*conn_);
    dropper.exec("SET lock_timeout = '200ms'");
    try {
      dropper.exec("DELETE FROM sqlgroup.session_parts WHERE part = 0");
      ADD_FAILURE() << "the part was dropped under an ack in flight";
    } catch (const pqxx::sql_error& e) {
      EXPECT_EQ(e.sqlstate(), "55P03") << e.what();  // lock_not_available
    }
    dropper.exec("SET lock_timeout = 0");
  }

  TestDatabase db_;
  std::unique_ptr<pqxx::connection> conn_;
  store::ClaimRef ref_;
};

std::vector<std::string> Ids(const std::vector<Item>& items) {
  std::vector<std::string> ids;
  for (const Item& i : items) ids.push_back(i.id);
  return ids;
}

// `acks` followed by 17 acks of no item under `take`: more than the 16
// whose fence DeleteOfTakes checks per item, so the statement is the one
// that checks each distinct take once.
constexpr size_t kPadding = 17;
std::vector<store::TakeItem> Many(std::vector<store::TakeItem> acks,
                                  const store::ClaimRef& take) {
  for (size_t i = 0; i < kPadding; ++i) {
    acks.push_back({absl::StrFormat("eeeeeeee-0000-4000-8000-%012d", i),
                    take.session, take.part, take.epoch});
  }
  return acks;
}

// The answers of DeleteOfTakes for `acks` alone, through the statement of
// many takes: its answers for the padding (Many) must all be false.
std::vector<bool> DeleteOfManyTakes(pqxx::connection& conn,
                                    const std::vector<store::TakeItem>& acks,
                                    const store::ClaimRef& padding) {
  std::vector<bool> each =
      store::DeleteOfTakes(conn, kGroup, Many(acks, padding));
  EXPECT_EQ(each.size(), acks.size() + kPadding);
  EXPECT_THAT(std::vector<bool>(each.begin() + acks.size(), each.end()),
              Each(false));
  each.resize(acks.size());
  return each;
}

// Runs each of the workers' statements once on `worker` (so that each is
// prepared on the server and planned from the statistics of now), then
// checks that each one's generic plan reads items by the primary key: no
// sequential or bitmap scan of the table, no sort; only the lag's look for
// the oldest items walks items_waiting_since, as it is meant to.
void ExpectEveryPlanReadsItemsByKey(pqxx::connection& worker,
                                    const store::ClaimRef& ref) {
  const KeyRange r = PartRange(0, kParts);
  ASSERT_TRUE(store::ClaimItems(worker, ref, r.first, r.last, 10).ok());
  store::DeleteClaimedNow(worker, ref, {kOtherPart});
  // (Ids of no item: the fixture's items stay.)
  store::DeleteClaimedNow(worker, ref,
                          {kOtherPart, "ffffffff-ffff-4fff-bfff-ffffffffffff"});
  store::AckAndClaim(worker, ref, {kOtherPart}, r.first, r.last, 10);
  store::DeleteOfTakes(
      worker, kGroup,
      {{kOtherPart, ref.session, ref.part, ref.epoch},
       {"ffffffff-ffff-4fff-bfff-ffffffffffff", ref.session, 7, ref.epoch}});
  store::DeleteOfTakes(
      worker, kGroup,
      Many({{kOtherPart, ref.session, ref.part, ref.epoch}}, ref));
  ASSERT_TRUE(store::ReleaseForRetry(worker, ref, {kOtherPart}, "",
                                     absl::ZeroDuration(), false)
                  .ok());
  ASSERT_TRUE(store::DeadLetter(worker, ref, kOtherPart, "").ok());
  ASSERT_TRUE(store::ProbeParts(worker, kGroup, {0}, {r}).ok());
  // A cap of 1: part 0 is at it, so its count is sampled and its oldest
  // item looked up too.
  ASSERT_TRUE(store::MeasureLag(worker, kGroup, {0}, {r}, 1).ok());
  ASSERT_TRUE(store::ClaimHeads(worker, ref, r.first, r.last, 64, 64, {}).ok());
  ASSERT_TRUE(
      store::ClaimRuns(worker, ref, r.first, r.last, 64, {}, false).ok());
  store::AckAndClaimRuns(worker, ref, {kOtherPart}, r.first, r.last, 64, {},
                         false);
  ASSERT_TRUE(store::NextOfKey(worker, ref, kFirst).ok());
  store::AckAndNextOfKey(worker, ref, kOtherPart);
  ASSERT_TRUE(store::ProbeHeads(worker, kGroup, {0}, {r}, 64).ok());
  ASSERT_TRUE(store::MeasureBlocked(worker, kGroup, {0}, {r}, 100).ok());
  store::PrepareFunctionAcks(worker, {.name = "public.handle"},
                             /*pauses=*/true);
  store::AckInFunction(worker, ref, kOtherPart);
  store::AckInFunctionAndNextOfKey(worker, ref, kOtherPart);
  store::PrepareFunctionAcks(worker,
                             {.name = "public.handle_all", .arrays = true},
                             /*pauses=*/true);
  store::AckInFunctionOnArrays(worker, ref, {kOtherPart});
  ASSERT_TRUE(store::StillDue(worker, ref, {kFirst, kOtherPart}).ok());
  const std::string a = FormatUuid(r.first), z = FormatUuid(r.last);
  const std::string take = absl::StrCat("'", kSession, "', 0, ", ref.epoch);
  const std::string claim =
      absl::StrCat("'g', ", take, ", '", a, "', '", z, "', 64");
  const std::string one = absl::StrCat("'{", kFirst, "}'");
  const std::string of_takes =
      absl::StrCat("('g', ", one, ", '{", kSession, "}', '{0}', '{", ref.epoch,
                   "}', '{0}')");
  const std::string parts =
      absl::StrCat("'g', '{0}', '{", a, "}', '{", z, "}'");
  const std::vector<std::string> explains = {
      absl::StrCat("sqlgroup_claim(", claim, ")"),
      absl::StrCat("sqlgroup_ack('g', ", one, ", ", take, ")"),
      absl::StrCat("sqlgroup_ack_one('g', '", kFirst, "', ", take, ")"),
      absl::StrCat("sqlgroup_ack_and_claim(", claim, ", ", one, ")"),
      absl::StrCat("sqlgroup_release('g', ", one, ", ", take,
                   ", 'e', '1 second', 1)"),
      absl::StrCat("sqlgroup_dead_letter('g', '", kFirst, "', ", take,
                   ", 'e', 1)"),
      absl::StrCat("sqlgroup_probe(", parts, ")"),
      absl::StrCat("sqlgroup_lag(", parts, ", 100)"),
      absl::StrCat("sqlgroup_claim_heads(", claim, ", 1, 64, '{}', 64)"),
      absl::StrCat("sqlgroup_claim_runs(", claim, ", '{}', false)"),
      absl::StrCat("sqlgroup_ack_and_claim_runs(", claim, ", '{}', false, ",
                   one, ")"),
      absl::StrCat("sqlgroup_next_of_key('g', ", take, ", '", kFirst,
                   "', '01000000-0000-4000-ffff-ffffffffffff')"),
      absl::StrCat("sqlgroup_ack_and_next_of_key('g', ", take, ", '", kFirst,
                   "', '01000000-0000-4000-ffff-ffffffffffff')"),
      absl::StrCat("sqlgroup_ack_in_function('g', '", kFirst, "', ", take, ")"),
      absl::StrCat("sqlgroup_ack_in_function_and_next_of_key('g', ", take,
                   ", '", kFirst, "', '01000000-0000-4000-ffff-ffffffffffff')"),
      absl::StrCat("sqlgroup_ack_in_function_on_arrays('g', ", one, ", ", take,
                   ")"),
      absl::StrCat("sqlgroup_probe_heads(", parts, ", 64)"),
      absl::StrCat("sqlgroup_blocked(", parts, ", 100)"),
      absl::StrCat("sqlgroup_still_due('g', ", one, ")"),
      absl::StrCat("sqlgroup_ack_of_takes", of_takes),
      absl::StrCat("sqlgroup_ack_of_many_takes", of_takes),
  };
  pqxx::work tx(worker);
  for (const std::string& e : explains) {
    std::string plan;
    for (const pqxx::row& row : tx.exec("EXPLAIN EXECUTE " + e)) {
      plan += row[0].as<std::string>() + "\n";
    }
    EXPECT_THAT(plan, Not(HasSubstr("Seq Scan on items"))) << e << "\n" << plan;
    EXPECT_THAT(plan, Not(HasSubstr("Bitmap"))) << e << "\n" << plan;
    EXPECT_THAT(plan, Not(HasSubstr("items_waiting_since"))) << e << "\n"
                                                             << plan;
    // No sort of items read; only the heads' claim orders the rows it
    // hands out (at most its limit) by step and id, and the function on
    // arrays the rows it deleted (at most the batch) by id, into its
    // arrays (a Sort node from PostgreSQL 16 on).
    if (absl::StartsWith(e, "sqlgroup_claim_heads(")) {
      EXPECT_THAT(plan, Not(ContainsRegex("Sort Key: [^w]"))) << e << "\n"
                                                              << plan;
    } else if (absl::StartsWith(e, "sqlgroup_ack_of_many_takes(")) {
      // Only the distinct takes may be sorted (they are locked in part
      // order): never the items, nor the list the deletes follow.
      EXPECT_THAT(plan, Not(ContainsRegex("Sort Key: (i|a)\\."))) << e << "\n"
                                                                  << plan;
    } else if (absl::StartsWith(e, "sqlgroup_ack_in_function_on_arrays(")) {
      EXPECT_THAT(plan, Not(ContainsRegex("Sort Key: [^a]"))) << e << "\n"
                                                              << plan;
    } else {
      EXPECT_THAT(plan, Not(HasSubstr("Sort"))) << e << "\n" << plan;
    }
  }
  std::string plan;
  for (const pqxx::row& row :
       tx.exec("EXPLAIN EXECUTE sqlgroup_oldest_waiting('g', 1000)")) {
    plan += row[0].as<std::string>() + "\n";
  }
  EXPECT_THAT(plan, HasSubstr("items_waiting_since")) << plan;
}

TEST_F(ClaimFenceTest,
       AClaimReadsDueItemsOfItsRangeInKeyOrderAndWritesNothing) {
  pqxx::nontransaction(*conn_).exec_params(
      "UPDATE sqlgroup.items SET not_before = 'infinity' WHERE id = $1",
      kSecond);
  // The transactions that wrote the items' current row versions.
  auto versions = [&] {
    pqxx::nontransaction tx(*conn_);
    return tx
        .exec1(
            "SELECT string_agg(xmin::text, ',' ORDER BY id) "
            "FROM sqlgroup.items")[0]
        .as<std::string>();
  };
  const std::string before = versions();
  auto items = Claim(ref_);
  ASSERT_TRUE(items.ok()) << items.status();
  EXPECT_THAT(Ids(*items), ElementsAre(kFirst));  // kSecond is not due
  EXPECT_EQ((*items)[0].epoch, ref_.epoch);
  EXPECT_EQ(versions(), before) << "a claim wrote a row version";
}

// Payloads are bytes: every value, an empty one, a long one, through the
// sweep's claim and the batch claim under per-key order alike, with the
// server's hex output and with the older escape format.
TEST_F(ClaimFenceTest, APayloadOfAnyBytesReachesTheHandlerAsEnqueued) {
  std::string every;
  for (int b = 0; b < 256; ++b) every.push_back(static_cast<char>(b));
  const std::vector<std::string> payloads = {every, "", std::string(5000, 'x'),
                                             std::string(1, '\0')};
  {
    pqxx::work tx(*conn_);
    tx.exec("DELETE FROM sqlgroup.items");
    for (size_t i = 0; i < payloads.size(); ++i) {
      tx.exec_params(
          "INSERT INTO sqlgroup.items (group_name, id, payload) VALUES "
          "($1, $2, $3)",
          kGroup, absl::StrCat("0", i, "000000-0000-4000-8000-000000000000"),
          pqxx::binarystring(payloads[i]));
    }
    tx.commit();
  }
  const KeyRange r = PartRange(0, kParts);
  for (const char* output : {"hex", "escape"}) {
    SCOPED_TRACE(output);
    pqxx::nontransaction(*conn_).exec(
        absl::StrCat("SET bytea_output = ", output));
    auto swept = store::ClaimItems(*conn_, ref_, r.first, r.last, 10);
    auto runs = store::ClaimRuns(*conn_, ref_, r.first, r.last, 10, {}, false);
    ASSERT_TRUE(swept.ok()) << swept.status();
    ASSERT_TRUE(runs.ok()) << runs.status();
    for (const std::vector<Item>* items : {&*swept, &runs->items}) {
      ASSERT_EQ(items->size(), payloads.size());
      for (size_t i = 0; i < payloads.size(); ++i) {
        EXPECT_EQ((*items)[i].payload, payloads[i]) << "item " << i;
      }
    }
  }
}

TEST_F(ClaimFenceTest, AClaimUnderATakeThatIsGoneIsAborted) {
  Drop(0);
  auto items = Claim(ref_);
  EXPECT_TRUE(absl::IsAborted(items.status())) << items.status();
}

TEST_F(ClaimFenceTest, AnAckUnderAnOldEpochDeletesNothing) {
  Drop(0);
  const store::ClaimRef again = Take(0);
  EXPECT_GT(again.epoch, ref_.epoch);
  EXPECT_EQ(store::DeleteClaimedNow(*conn_, ref_, {kFirst}), 0);
  EXPECT_EQ(store::DeleteClaimedNow(*conn_, ref_, {kSecond, kFirst}), 0);
  EXPECT_EQ(store::DeleteClaimedNow(*conn_, again, {kFirst}), 1);
}

// The acks of several takes in one statement (SharedCommit): each item is
// deleted under its own take, as its own ack would be.
TEST_F(ClaimFenceTest, ASharedAckDeletesEachItemUnderItsOwnTakeOnly) {
  const store::ClaimRef other = Take(1);
  // Given out of part order: the statement sorts them (its locks in the
  // order a drop takes them) and answers by the caller's places.
  EXPECT_THAT(store::DeleteOfTakes(
                  *conn_, kGroup,
                  {{kOtherPart, kSession, 1, other.epoch},
                   // An old epoch of part 0: not this take's item any more.
                   {kSecond, kSession, 0, ref_.epoch - 1},
                   {kFirst, kSession, 0, ref_.epoch}}),
              ElementsAre(true, false, true));
  EXPECT_EQ(Count("items"), 1);
  // Again: acknowledged once.
  EXPECT_THAT(
      store::DeleteOfTakes(*conn_, kGroup, {{kFirst, kSession, 0, ref_.epoch}}),
      ElementsAre(false));
  // One id under an old take and the live one: deleted for the live one.
  EXPECT_THAT(store::DeleteOfTakes(*conn_, kGroup,
                                   {{kSecond, kSession, 0, ref_.epoch},
                                    {kSecond, kSession, 0, ref_.epoch - 1}}),
              ElementsAre(true, false));
  EXPECT_EQ(Count("items"), 0);
}

// The same through the statement of many items (each distinct take
// checked and locked once).
TEST_F(ClaimFenceTest, ASharedAckOfManyItemsDeletesEachUnderItsOwnTakeOnly) {
  const store::ClaimRef other = Take(1);
  EXPECT_THAT(DeleteOfManyTakes(*conn_,
                                {{kOtherPart, kSession, 1, other.epoch},
                                 {kSecond, kSession, 0, ref_.epoch - 1},
                                 {kFirst, kSession, 0, ref_.epoch}},
                                other),
              ElementsAre(true, false, true));
  EXPECT_EQ(Count("items"), 1);
  EXPECT_THAT(
      DeleteOfManyTakes(*conn_, {{kFirst, kSession, 0, ref_.epoch}}, other),
      ElementsAre(false));
  EXPECT_THAT(DeleteOfManyTakes(*conn_,
                                {{kSecond, kSession, 0, ref_.epoch},
                                 {kSecond, kSession, 0, ref_.epoch - 1}},
                                other),
              ElementsAre(true, false));
  EXPECT_EQ(Count("items"), 0);
}

// Up to 16 items, the statement that fences each item; from 17 on, the
// one that fences each distinct take once.
TEST_F(ClaimFenceTest, ASharedAckOfMoreThanSixteenItemsFencesEachTakeOnce) {
  const auto runs = [&](const char* like) {
    return pqxx::nontransaction(*conn_)
        .exec_params1(
            "SELECT coalesce(sum(generic_plans + custom_plans), 0) "
            "FROM pg_prepared_statements WHERE name LIKE $1",
            like)[0]
        .as<int64_t>();
  };
  const char* const kPerItem = "sqlgroup\\_ack\\_of\\_takes%";
  const char* const kPerTake = "sqlgroup\\_ack\\_of\\_many\\_takes%";
  for (size_t size : {16u, 17u}) {
    SCOPED_TRACE(absl::StrCat(size, " items"));
    std::vector<store::TakeItem> acks;
    for (size_t i = 0; i < size; ++i) {
      acks.push_back({absl::StrFormat("dddddddd-0000-4000-8000-%012d", i),
                      kSession, 0, ref_.epoch});
    }
    const int64_t per_item = runs(kPerItem), per_take = runs(kPerTake);
    EXPECT_THAT(store::DeleteOfTakes(*conn_, kGroup, acks), Each(false));
    EXPECT_EQ(runs(kPerItem) - per_item, size <= 16 ? 1 : 0);
    EXPECT_EQ(runs(kPerTake) - per_take, size <= 16 ? 0 : 1);
  }
}

TEST_F(ClaimFenceTest,
       ASharedAckOfManyUnderAZombieOrADroppedTakeDeletesNothing) {
  const store::ClaimRef other = Take(1);
  Drop(0);
  EXPECT_THAT(
      DeleteOfManyTakes(*conn_, {{kFirst, kSession, 0, ref_.epoch}}, other),
      ElementsAre(false));
  pqxx::nontransaction(*conn_).exec_params(
      "UPDATE sqlgroup.sessions SET heartbeated_at = "
      "clock_timestamp() - interval '1 hour' WHERE id = $1",
      kSession);
  EXPECT_THAT(DeleteOfManyTakes(*conn_,
                                {{kOtherPart, kSession, 1, other.epoch},
                                 {kSecond, kSession, 0, ref_.epoch}},
                                other),
              ElementsAre(false, false));
  EXPECT_EQ(Count("items"), 3);
}

TEST_F(ClaimFenceTest, ASharedAckOfAZombieOrADroppedTakeDeletesNothing) {
  const store::ClaimRef other = Take(1);
  Drop(0);
  EXPECT_THAT(
      store::DeleteOfTakes(*conn_, kGroup, {{kFirst, kSession, 0, ref_.epoch}}),
      ElementsAre(false));
  pqxx::nontransaction(*conn_).exec_params(
      "UPDATE sqlgroup.sessions SET heartbeated_at = "
      "clock_timestamp() - interval '1 hour' WHERE id = $1",
      kSession);
  EXPECT_THAT(store::DeleteOfTakes(*conn_, kGroup,
                                   {{kOtherPart, kSession, 1, other.epoch},
                                    {kSecond, kSession, 0, ref_.epoch}}),
              ElementsAre(false, false));
  EXPECT_EQ(Count("items"), 3);
}

// A SQL function handler runs in the ack's statement, on exactly the
// items the fence lets it delete: never under a take that is gone, never
// twice for an item.
TEST_F(ClaimFenceTest, ASqlFunctionRunsOnlyOnWhatTheFencedAckDeletes) {
  store::PrepareFunctionAcks(*conn_, {.name = "public.handle"},
                             /*pauses=*/true);
  Drop(0);
  const store::ClaimRef again = Take(0);
  EXPECT_EQ(store::AckInFunction(*conn_, ref_, kFirst), 0);
  EXPECT_THAT(Calls(), ::testing::IsEmpty());
  EXPECT_EQ(store::AckInFunction(*conn_, again, kSecond), 1);
  EXPECT_EQ(store::AckInFunction(*conn_, again, kFirst), 1);
  EXPECT_THAT(Calls(), ElementsAre(kSecond, kFirst));
  EXPECT_EQ(store::AckInFunction(*conn_, again, kFirst), 0);
  EXPECT_EQ(Calls().size(), 2u);
  EXPECT_EQ(Count("items"), 1);
}

TEST_F(ClaimFenceTest, ASqlFunctionOnArraysIsCalledOncePerBatch) {
  store::PrepareFunctionAcks(*conn_,
                             {.name = "public.handle_all", .arrays = true},
                             /*pauses=*/true);
  EXPECT_EQ(store::AckInFunctionOnArrays(*conn_, ref_, {}), 0);
  EXPECT_EQ(store::AckInFunctionOnArrays(*conn_, ref_, {kSecond, kFirst}), 2);
  EXPECT_THAT(Calls(), ElementsAre(kFirst, kSecond));
  EXPECT_EQ(Count("items"), 1);
  pqxx::nontransaction tx(*conn_);
  EXPECT_EQ(tx.exec1("SELECT min(items) FROM public.calls")[0].as<int>(), 2);
}

// An error the function raises undoes the whole statement, the delete
// with it, and reaches the caller with its SQLSTATE (SGDLQ: dead-letter).
TEST_F(ClaimFenceTest, ASqlFunctionsErrorUndoesItsAck) {
  store::PrepareFunctionAcks(*conn_, {.name = "public.handle"},
                             /*pauses=*/true);
  pqxx::nontransaction(*conn_).exec_params(
      "UPDATE sqlgroup.items SET payload = 'dead' WHERE id = $1", kFirst);
  try {
    store::AckInFunction(*conn_, ref_, kFirst);
    ADD_FAILURE() << "the function's error was lost";
  } catch (const pqxx::sql_error& e) {
    EXPECT_EQ(e.sqlstate(), kDeadLetterSqlState);
    EXPECT_THAT(store::PrimaryMessage(e),
                ::testing::StartsWith("item 01000000-"));
  }
  EXPECT_THAT(Calls(), ::testing::IsEmpty());
  EXPECT_EQ(Count("items"), 3);
  // The key's next item comes with the ack of the one before it.
  store::AckedAndClaimed r =
      store::AckInFunctionAndNextOfKey(*conn_, ref_, kSecond);
  EXPECT_EQ(r.acked, 1);
  EXPECT_THAT(Calls(), ElementsAre(kSecond));
}

TEST_F(ClaimFenceTest, ASqlFunctionThatCannotBeCalledIsRefusedByTheCheck) {
  struct Case {
    SqlFunction function;
    std::string why;
  };
  for (const Case& c : std::vector<Case>{
           {{.name = "public.nope"}, "does not exist"},
           {{.name = "public.handle", .arrays = true}, "does not exist"},
           {{.name = "public.handle_set"}, "set-returning functions"},
           {{.name = "public.handle_strict"}, "CALLED ON NULL INPUT"},
           // On the search_path, and in capitals: names fold to lower case.
           {{.name = "Handle_Strict"}, "CALLED ON NULL INPUT"},
       }) {
    const absl::Status s = store::CheckSqlFunction(*conn_, c.function);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.function.name;
    EXPECT_THAT(s.message(), HasSubstr(c.why)) << s;
    EXPECT_THAT(s.message(), HasSubstr("sql_function " + c.function.name));
  }
  EXPECT_TRUE(store::CheckSqlFunction(*conn_, {.name = "public.handle"}).ok());
  EXPECT_TRUE(store::CheckSqlFunction(*conn_, {.name = "handle"}).ok());
  // Arrays are never NULL: a STRICT function of arrays passes.
  pqxx::nontransaction(*conn_).exec(
      "ALTER FUNCTION public.handle_all(text[], bytea[], uuid[]) STRICT");
  EXPECT_TRUE(store::CheckSqlFunction(
                  *conn_, {.name = "public.handle_all", .arrays = true})
                  .ok());
  // An overload of the same name for arrays, STRICT, is not the one a
  // call on single items resolves to; nor is one of other arguments.
  pqxx::nontransaction(*conn_).exec(
      "CREATE FUNCTION public.handle(k text[], p bytea[], i uuid[]) "
      "RETURNS void LANGUAGE sql STRICT AS $$ SELECT $$; "
      "CREATE FUNCTION public.handle(k text) RETURNS SETOF int "
      "LANGUAGE sql STRICT AS $$ SELECT 1 $$");
  EXPECT_TRUE(store::CheckSqlFunction(*conn_, {.name = "public.handle"}).ok());
  EXPECT_TRUE(
      store::CheckSqlFunction(*conn_, {.name = "public.handle", .arrays = true})
          .ok());
  {
    pqxx::work tx(*conn_);
    const store::FunctionTraits single =
        store::FunctionTraitsOf(tx, {.name = "public.handle"});
    EXPECT_FALSE(single.strict);
    EXPECT_FALSE(single.returns_set);
    EXPECT_TRUE(
        store::FunctionTraitsOf(tx, {.name = "public.handle", .arrays = true})
            .strict);
  }
  EXPECT_EQ(Count("items"), 3);  // checked, not run
}

// The ack's statements return a boolean whatever the function returns:
// the function replaced by one of another result type, the statements
// prepared before go on (a plan must not change its result type, 0A000).
TEST_F(ClaimFenceTest, ASqlFunctionReplacedWithAnotherResultTypeGoesOn) {
  store::PrepareFunctionAcks(*conn_, {.name = "public.handle"},
                             /*pauses=*/true);
  EXPECT_EQ(store::AckInFunction(*conn_, ref_, kFirst), 1);
  pqxx::nontransaction(*conn_).exec(
      "DROP FUNCTION public.handle(text, bytea, uuid); "
      "CREATE FUNCTION public.handle(k text, p bytea, i uuid) RETURNS text "
      "LANGUAGE sql AS $$ INSERT INTO public.calls (id) VALUES (i) "
      "RETURNING 'done' $$");
  EXPECT_EQ(store::AckInFunction(*conn_, ref_, kSecond), 1);
  EXPECT_THAT(Calls(), ElementsAre(kFirst, kSecond));
}

// The settling statements bound their ids by the first and the last in
// key order (WithIds); ids given out of order are put in it, not missed.
TEST_F(ClaimFenceTest, IdsInAnyOrderAreAllSettled) {
  ASSERT_EQ(store::ReleaseForRetry(*conn_, ref_, {kSecond, kFirst}, "e",
                                   absl::ZeroDuration(), true)
                .value_or(-1),
            2);
  EXPECT_EQ(Count("items WHERE attempts = 1"), 2);
  EXPECT_EQ(store::DeleteClaimedNow(*conn_, ref_, {kSecond, kFirst}), 2);
  EXPECT_EQ(Count("items"), 1);  // the other part's
}

TEST_F(ClaimFenceTest, AZombiePastItsTtlCannotClaimAckReleaseOrDeadLetter) {
  // The session is expired by the database clock but not reaped yet: its
  // take still exists.
  pqxx::nontransaction(*conn_).exec_params(
      "UPDATE sqlgroup.sessions SET heartbeated_at = "
      "clock_timestamp() - interval '1 hour' WHERE id = $1",
      kSession);
  EXPECT_TRUE(absl::IsAborted(Claim(ref_).status()));
  EXPECT_EQ(store::DeleteClaimedNow(*conn_, ref_, {kFirst}), 0);
  const store::AckedAndClaimed both =
      store::AckAndClaim(*conn_, ref_, {kFirst}, *ParseUuid(kFirst) + 1,
                         PartRange(0, kParts).last, 10);
  EXPECT_EQ(both.acked, 0);
  EXPECT_TRUE(absl::IsAborted(both.next.status()));
  auto released = store::ReleaseForRetry(*conn_, ref_, {kFirst}, "boom",
                                         absl::Seconds(1), true);
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_EQ(*released, 0);
  auto dead = store::DeadLetter(*conn_, ref_, kFirst, "boom");
  ASSERT_TRUE(dead.ok()) << dead.status();
  EXPECT_FALSE(*dead);
  EXPECT_EQ(Count("items"), 3);
  EXPECT_EQ(Count("dead_items"), 0);
  pqxx::nontransaction tx(*conn_);
  EXPECT_EQ(tx.exec1("SELECT max(attempts) FROM sqlgroup.items")[0].as<int>(),
            0);
}

// The ack of a batch with the claim of the next in one statement: the
// claim reads from before the delete, from where the caller says (past
// the acked ids), and both are fenced like their separate statements.
TEST_F(ClaimFenceTest, AnAckCarriesTheNextClaimUnderTheSameFence) {
  const KeyRange r = PartRange(0, kParts);
  // From the range's start, the claim still sees the item the same
  // statement deletes: callers start past the acked ids.
  store::AckedAndClaimed both =
      store::AckAndClaim(*conn_, ref_, {kFirst}, r.first, r.last, 10);
  EXPECT_EQ(both.acked, 1);
  ASSERT_TRUE(both.next.ok()) << both.next.status();
  EXPECT_THAT(Ids(*both.next), ElementsAre(kFirst, kSecond));
  EXPECT_EQ(Count("items"), 2);
  // Past the range's last item: acked, and nothing more to claim.
  both = store::AckAndClaim(*conn_, ref_, {kSecond}, *ParseUuid(kSecond) + 1,
                            r.last, 10);
  EXPECT_EQ(both.acked, 1);
  ASSERT_TRUE(both.next.ok()) << both.next.status();
  EXPECT_TRUE(both.next->empty());
  // Under a take that is gone: nothing deleted, the claim aborted.
  const store::ClaimRef other = Take(1);
  Drop(1);
  both = store::AckAndClaim(*conn_, other, {kOtherPart}, 0, ~Uuid128(0), 10);
  EXPECT_EQ(both.acked, 0);
  EXPECT_TRUE(absl::IsAborted(both.next.status())) << both.next.status();
  EXPECT_EQ(Count("items"), 1);
}

TEST_F(ClaimFenceTest, ReleaseAndDeadLetterWorkUnderTheTake) {
  auto released = store::ReleaseForRetry(*conn_, ref_, {kFirst}, "boom",
                                         absl::Hours(1), true);
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_EQ(*released, 1);
  auto items = Claim(ref_);
  ASSERT_TRUE(items.ok()) << items.status();
  EXPECT_THAT(Ids(*items), ElementsAre(kSecond));  // kFirst backs off
  auto dead = store::DeadLetter(*conn_, ref_, kSecond, "boom");
  ASSERT_TRUE(dead.ok()) << dead.status();
  EXPECT_TRUE(*dead);
  EXPECT_EQ(Count("dead_items"), 1);
  EXPECT_EQ(Count("items"), 2);
}

// The take is held FOR KEY SHARE by the ack's transaction: a drop (or the
// cascade of a reap) waits for it instead of moving the part under an
// ack that then commits.
TEST_F(ClaimFenceTest, ADropOfThePartWaitsForAnAckInFlight) {
  pqxx::connection acker(db_.dsn());
  store::PrepareItemStatements(acker, /*pauses=*/true);
  pqxx::work ack(acker);
  EXPECT_EQ(store::DeleteClaimed(ack, ref_, {kFirst}), 1);
  ExpectADropOfPartZeroToWait();
  ack.commit();
  Drop(0);
  EXPECT_EQ(Count("session_parts"), 0);
  EXPECT_EQ(Count("items"), 2);  // kFirst was acknowledged once
}

// The same for the shared ack of several takes, in both of its statements
// (each item's take checked, and each distinct take checked once), held
// in a transaction that the grouped calls of a SQL function leave open.
TEST_F(ClaimFenceTest, ADropOfThePartWaitsForASharedAckInFlight) {
  pqxx::connection acker(db_.dsn());
  store::PrepareItemStatements(acker, /*pauses=*/true);
  store::ClaimRef take = ref_;
  for (const char* id : {kFirst, kSecond}) {
    const bool many = id == kSecond;
    SCOPED_TRACE(many ? "many items" : "few items");
    std::vector<store::TakeItem> acks = {
        {id, kSession, 0, take.epoch},
        {"01ffffff-0000-4000-8000-000000000000", kSession, 0, take.epoch}};
    if (many) acks = Many(acks, take);
    pqxx::nontransaction(acker).exec("BEGIN");
    const std::vector<bool> each = store::DeleteOfTakes(acker, kGroup, acks);
    ASSERT_FALSE(each.empty());
    EXPECT_TRUE(each[0]);
    ExpectADropOfPartZeroToWait();
    pqxx::nontransaction(acker).exec("COMMIT");
    Drop(0);
    take = Take(0);
  }
  EXPECT_EQ(Count("items"), 1);
}

// And an ack that comes while a drop is in flight waits for it, then finds
// the take gone.
TEST_F(ClaimFenceTest, AnAckDuringADropWaitsAndThenDeletesNothing) {
  pqxx::connection dropper_conn(db_.dsn());
  pqxx::work drop(dropper_conn);
  drop.exec("DELETE FROM sqlgroup.session_parts WHERE part = 0");
  auto acked = std::async(std::launch::async, [&] {
    pqxx::connection acker(db_.dsn());
    store::PrepareItemStatements(acker, /*pauses=*/true);
    return store::DeleteClaimedNow(acker, ref_, {kFirst});
  });
  EXPECT_EQ(acked.wait_for(std::chrono::milliseconds(300)),
            std::future_status::timeout)
      << "the ack did not wait for the drop";
  drop.commit();
  EXPECT_EQ(acked.get(), 0);
  EXPECT_EQ(Count("items"), 3);
}

// A connection with the item statements runs every prepared statement's
// generic plan (plan_cache_mode): each must still find items by index, not
// by reading the whole table.
TEST_F(ClaimFenceTest, TheWorkersGenericPlansReadItemsByIndex) {
  {
    pqxx::work tx(*conn_);
    tx.exec_params(
        "INSERT INTO sqlgroup.items (group_name, id) SELECT $1, "
        "gen_random_uuid() FROM generate_series(1, 20000)",
        kGroup);
    tx.commit();
  }
  pqxx::nontransaction(*conn_).exec("ANALYZE");
  pqxx::connection worker(db_.dsn());
  store::PrepareItemStatements(worker, /*pauses=*/true);
  EXPECT_EQ(pqxx::nontransaction(worker)
                .exec1("SHOW plan_cache_mode")[0]
                .as<std::string>(),
            "force_generic_plan");
  // And never JIT-compiled, however costly the plan looks: a compile per
  // claim once the backlog made its estimate pass jit_above_cost cost
  // more CPU than running it (bench/RESULTS.md, session 17).
  EXPECT_EQ(pqxx::nontransaction(worker).exec1("SHOW jit")[0].as<std::string>(),
            "off");
  {
    pqxx::nontransaction tx(worker);
    tx.exec("SET jit_above_cost = 0");
    std::string plan;
    for (const pqxx::row& row :
         tx.exec("EXPLAIN (ANALYZE) SELECT count(*) FROM sqlgroup.items")) {
      plan += row[0].as<std::string>() + "\n";
    }
    EXPECT_EQ(plan.find("JIT"), std::string::npos) << plan;
    tx.exec("RESET jit_above_cost");
  }
  ExpectEveryPlanReadsItemsByKey(worker, ref_);
}

// A queue table that churns looks nearly empty to the planner: a vacuum
// saw a handful of live rows on a few pages, while the index entries of
// the thousands deleted since wait for the next one. A plan made from
// those statistics by a connection that then keeps it (force_generic_plan)
// must still walk the primary key: a sequential scan, or a bitmap of the
// group's entries of items_waiting_since, reads every dead entry on every
// ack (0.8 ms an ack under 1,500 items/s, bench/RESULTS.md, session 18).
TEST_F(ClaimFenceTest, ANearlyEmptyChurnedTableKeepsThePlansOnTheKey) {
  {
    pqxx::nontransaction tx(*conn_);
    // This throwaway database's own vacuum would make the point moot.
    tx.exec("ALTER TABLE sqlgroup.items SET (autovacuum_enabled = off)");
    // 5,000 items come and go, but for about one in `keep` (kept: the
    // vacuum cannot truncate the table, the live rows are spread over its
    // pages). The fixture's three items stay.
    const auto churn = [&](int keep) {
      tx.exec(
          "INSERT INTO sqlgroup.items (group_name, id) SELECT 'g', "
          "gen_random_uuid() FROM generate_series(1, 5000)");
      tx.exec_params(
          "DELETE FROM sqlgroup.items WHERE id NOT IN ($1, $2, $3) "
          "AND hashtext(id::text) % $4 <> 0",
          kFirst, kSecond, kOtherPart, keep);
    };
    churn(500);
    tx.exec("VACUUM ANALYZE sqlgroup.items");
    churn(1000000000);
  }
  pqxx::connection worker(db_.dsn());
  store::PrepareItemStatements(worker, /*pauses=*/true);
  ExpectEveryPlanReadsItemsByKey(worker, ref_);
}

}  // namespace
}  // namespace sqlgroup
