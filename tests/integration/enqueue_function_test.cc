// sqlgroup.enqueue, the SQL producer of schema 6: its key placement is
// the C++ one bit for bit (key_placement.h), a key's items land in one
// part for every part count and in enqueue order, unkeyed items are laid
// out as item_ids.h lays them, a producer role may call it after
// `sqlgroup grant`, bad input changes nothing, and a transaction of many
// calls wakes the members once.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <pqxx/pqxx>
#include <set>
#include <string>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "item_ids.h"
#include "key_placement.h"
#include "keyspace.h"
#include "sqlgroup/admin.h"
#include "store/member_store.h"
#include "support/notifications.h"
#include "support/pg_fixture.h"

namespace sqlgroup {
namespace {

using testing::Announcements;
using ::testing::HasSubstr;
using testing::TestDatabase;
using testing::TestRole;

constexpr char kGroup[] = "g";
constexpr int kParts = 16;

uint64_t Low64(Uuid128 id) { return absl::Uint128Low64(id); }

// `code_point` as UTF-8.
std::string Utf8(uint32_t code_point) {
  std::string out;
  if (code_point < 0x80) {
    out += static_cast<char>(code_point);
  } else if (code_point < 0x800) {
    out += static_cast<char>(0xc0 | (code_point >> 6));
    out += static_cast<char>(0x80 | (code_point & 0x3f));
  } else if (code_point < 0x10000) {
    out += static_cast<char>(0xe0 | (code_point >> 12));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (code_point & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (code_point >> 18));
    out += static_cast<char>(0x80 | ((code_point >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (code_point & 0x3f));
  }
  return out;
}

// Keys of every kind: the empty one, a few fixed ones, random ASCII
// (control characters but NUL included, which text cannot hold) and
// random UTF-8 from every sequence length.
std::vector<std::string> SampleKeys(int count) {
  std::vector<std::string> keys = {"",  "user-7", "ключ",   "鍵",
                                   "🔑", " ",      "a\tb\nc"};
  absl::BitGen gen;
  while (static_cast<int>(keys.size()) < count) {
    std::string key;
    const int length = absl::Uniform(gen, 1, 24);
    const bool ascii = keys.size() % 2 == 0;
    for (int i = 0; i < length; ++i) {
      if (ascii) {
        key += static_cast<char>(absl::Uniform(gen, 1, 128));
        continue;
      }
      uint32_t c = 0;
      switch (absl::Uniform(gen, 0, 4)) {
        case 0:
          c = absl::Uniform<uint32_t>(gen, 1, 0x80);
          break;
        case 1:
          c = absl::Uniform<uint32_t>(gen, 0x80, 0x800);
          break;
        case 2:
          do {
            c = absl::Uniform<uint32_t>(gen, 0x800, 0x10000);
          } while (c >= 0xd800 && c <= 0xdfff);  // surrogates
          break;
        default:
          c = absl::Uniform<uint32_t>(gen, 0x10000, 0x110000);
      }
      key += Utf8(c);
    }
    // Distinct: a short random key can come twice (two one-byte keys of
    // the same byte), and tests count items per key.
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      keys.push_back(key);
    }
  }
  return keys;
}

// A SQL array literal expression of `values` (text, quoted by `tx`):
// ARRAY['a', NULL, ...]::text[].
std::string TextArray(pqxx::transaction_base& tx,
                      const std::vector<std::optional<std::string>>& values) {
  std::vector<std::string> quoted;
  for (const auto& v : values) quoted.push_back(v ? tx.quote(*v) : "NULL");
  return absl::StrCat("ARRAY[", absl::StrJoin(quoted, ","), "]::text[]");
}

// ARRAY['\x..'::bytea, ...]::bytea[], NULL for nullopt.
std::string ByteaArray(pqxx::transaction_base& tx,
                       const std::vector<std::optional<std::string>>& values) {
  std::vector<std::string> quoted;
  for (const auto& v : values) {
    quoted.push_back(v ? absl::StrCat(tx.quote_raw(*v), "::bytea") : "NULL");
  }
  return absl::StrCat("ARRAY[", absl::StrJoin(quoted, ","), "]::bytea[]");
}

Uuid128 ParsedId(const pqxx::field& f) {
  const std::optional<Uuid128> id = ParseUuid(f.as<std::string>());
  EXPECT_TRUE(id.has_value()) << f.c_str();
  return id.value_or(0);
}

// The ids of one bulk call, in the order returned.
std::vector<Uuid128> EnqueueBulk(
    pqxx::transaction_base& tx, const std::string& group,
    const std::vector<std::optional<std::string>>& keys,
    const std::vector<std::optional<std::string>>& payloads,
    const std::string& delay = "0") {
  std::vector<Uuid128> ids;
  for (const pqxx::row& row : tx.exec(absl::StrCat(
           "SELECT id::text FROM sqlgroup.enqueue_many(", tx.quote(group), ", ",
           TextArray(tx, keys), ", ", ByteaArray(tx, payloads), ", ",
           tx.quote(delay), "::interval) AS id"))) {
    ids.push_back(ParsedId(row[0]));
  }
  return ids;
}

Uuid128 EnqueueOne(pqxx::transaction_base& tx, const std::string& group,
                   const std::optional<std::string>& key,
                   const std::string& payload) {
  return ParsedId(
      tx.exec_params1("SELECT sqlgroup.enqueue($1, $2::text, $3::bytea)::text",
                      group, key, pqxx::binarystring(payload))[0]);
}

class EnqueueFunctionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    admin_ = testing::MigratedAdmin(db_.dsn());
    ASSERT_NE(admin_, nullptr);
    ASSERT_TRUE(admin_->CreateGroup({.name = kGroup, .parts = kParts}).ok());
    conn_ = std::make_unique<pqxx::connection>(db_.dsn());
  }

  int64_t Count(const std::string& sql) {
    pqxx::nontransaction tx(*conn_);
    return tx.exec1(sql)[0].as<int64_t>();
  }

  TestDatabase db_;
  std::unique_ptr<Admin> admin_;
  std::unique_ptr<pqxx::connection> conn_;
};

TEST_F(EnqueueFunctionTest, SqlKeyBlockEqualsTheCppOneForTwoThousandKeys) {
  const std::vector<std::string> keys = SampleKeys(2000);
  pqxx::work tx(*conn_);
  size_t checked = 0;
  for (size_t start = 0; start < keys.size(); start += 500) {
    std::vector<std::string> rows;
    for (size_t i = start; i < std::min(keys.size(), start + 500); ++i) {
      rows.push_back(absl::StrCat("(", i, ",", tx.quote(keys[i]), ")"));
    }
    for (const pqxx::row& row : tx.exec(
             absl::StrCat("SELECT i, sqlgroup.key_block(k)::text FROM (VALUES ",
                          absl::StrJoin(rows, ","), ") v(i, k)"))) {
      const std::string& key = keys[row[0].as<size_t>()];
      EXPECT_EQ(row[1].as<std::string>(), std::to_string(KeyBlock(key)))
          << "key '" << key << "' (" << key.size() << " bytes)";
      ++checked;
    }
  }
  EXPECT_EQ(checked, keys.size());
}

TEST_F(EnqueueFunctionTest, SqlSplitTestAgreesWithTheCppOneOnBoundaryBlocks) {
  // The block of each boundary floor(p * 2^128 / P), and its neighbours:
  // split exactly when the boundary is not the block's first id, and the
  // neighbours never.
  absl::BitGen gen;
  struct Case {
    uint64_t block;
    bool split;
  };
  std::vector<Case> cases;
  std::vector<int> part_counts = {2,  3,  4,   5,    7,    12,
                                  16, 40, 255, 1000, 4095, 4096};
  for (int i = 0; i < 40; ++i)
    part_counts.push_back(absl::Uniform(gen, 2, 4097));
  for (int parts : part_counts) {
    for (int n = 0; n < 8; ++n) {
      const int p = absl::Uniform(gen, 1, parts);
      const Uuid128 boundary = PartStart(p, parts);
      const uint64_t block = absl::Uint128High64(boundary);
      cases.push_back({block, Low64(boundary) != 0});
      cases.push_back({block - 1, false});
      cases.push_back({block + 1, false});
    }
  }
  for (uint64_t block : {uint64_t{0}, uint64_t{1}, ~uint64_t{0},
                         ~uint64_t{0} - 1, uint64_t{1} << 63}) {
    cases.push_back({block, testing_only::BlockIsSplitBruteForce(block)});
  }
  for (int i = 0; i < 100; ++i) {
    const uint64_t block = absl::Uniform<uint64_t>(gen);
    cases.push_back({block, testing_only::BlockIsSplitBruteForce(block)});
  }
  int split = 0;
  for (const Case& c : cases) {
    ASSERT_EQ(BlockIsSplit(c.block), c.split) << c.block;
    split += c.split;
  }
  EXPECT_GT(split, 300);  // the sample exercises both answers

  pqxx::work tx(*conn_);
  std::vector<std::string> rows;
  for (size_t i = 0; i < cases.size(); ++i) {
    rows.push_back(absl::StrCat("(", i, ",", cases[i].block, "::numeric)"));
  }
  size_t checked = 0;
  for (const pqxx::row& row : tx.exec(
           absl::StrCat("SELECT i, sqlgroup.block_is_split(b) FROM (VALUES ",
                        absl::StrJoin(rows, ","), ") v(i, b)"))) {
    const Case& c = cases[row[0].as<size_t>()];
    EXPECT_EQ(row[1].as<bool>(), c.split) << "block " << c.block;
    ++checked;
  }
  EXPECT_EQ(checked, cases.size());
  // Block numbers out of range are refused, not wrapped.
  EXPECT_THROW(tx.exec("SELECT sqlgroup.block_is_split(18446744073709551616)"),
               pqxx::sql_error);
}

TEST_F(EnqueueFunctionTest, EveryItemOfAKeyLandsInItsKeysBlockAndOnePart) {
  const std::vector<std::string> keys = SampleKeys(60);
  std::map<std::string, std::vector<Uuid128>> ids;
  {
    pqxx::work tx(*conn_);
    for (const std::string& key : keys) {
      ids[key].push_back(EnqueueOne(tx, kGroup, key, "single"));
    }
    tx.commit();
  }
  {
    pqxx::work tx(*conn_);
    std::vector<std::optional<std::string>> bulk_keys, payloads;
    for (int round = 0; round < 3; ++round) {
      for (const std::string& key : keys) {
        bulk_keys.push_back(key);
        payloads.push_back("bulk");
      }
    }
    const std::vector<Uuid128> got =
        EnqueueBulk(tx, kGroup, bulk_keys, payloads);
    ASSERT_EQ(got.size(), bulk_keys.size());
    for (size_t i = 0; i < got.size(); ++i)
      ids[*bulk_keys[i]].push_back(got[i]);
    tx.commit();
  }
  const uint64_t now = static_cast<uint64_t>(absl::ToUnixMicros(absl::Now()));
  for (const auto& [key, key_ids] : ids) {
    SCOPED_TRACE(absl::StrCat("key '", key, "'"));
    ASSERT_EQ(key_ids.size(), 4u);
    const uint64_t block = KeyBlock(key);
    for (const Uuid128 id : key_ids) {
      EXPECT_EQ(absl::Uint128High64(id), block);
      // The C++ layout of the same block, time and noise.
      const uint64_t time = Low64(id) >> kKeyedNoiseBits;
      EXPECT_EQ(id, KeyedItemId(block, time,
                                static_cast<uint16_t>(Low64(id) & 0xfff)));
      // The database clock, give or take a minute.
      EXPECT_NEAR(static_cast<double>(time), static_cast<double>(now), 60e6);
      for (int parts : {1, 2, 3, 16, 40, 1000, 4096}) {
        EXPECT_EQ(PartOf(id, parts), PartOf(BlockStart(block), parts))
            << parts << " parts";
      }
    }
  }
}

TEST_F(EnqueueFunctionTest, IdsOfAKeyIncreaseOverCallsAndTransactions) {
  std::vector<Uuid128> ids;
  {
    // Calls faster than the clock ticks still get increasing ids.
    pqxx::work tx(*conn_);
    for (int i = 0; i < 200; ++i) {
      ids.push_back(EnqueueOne(tx, kGroup, "k", absl::StrCat(i)));
    }
    const auto bulk = EnqueueBulk(tx, kGroup, {"k", "k"}, {"200", "201"});
    ids.insert(ids.end(), bulk.begin(), bulk.end());
    tx.commit();
  }
  for (int round = 0; round < 3; ++round) {
    pqxx::connection other(db_.dsn());
    pqxx::work tx(other);
    for (int i = 0; i < 20; ++i) {
      ids.push_back(EnqueueOne(tx, kGroup, "k", "later"));
    }
    tx.commit();
  }
  ASSERT_EQ(ids.size(), 262u);
  for (size_t i = 1; i < ids.size(); ++i) {
    ASSERT_LT(ids[i - 1], ids[i]) << "call " << i;
  }
  // The table agrees: in id order, the payloads of the first transaction
  // come in call order.
  pqxx::nontransaction tx(*conn_);
  int expected = 0;
  for (const pqxx::row& row :
       tx.exec("SELECT convert_from(payload, 'UTF8') FROM sqlgroup.items "
               "WHERE key = 'k' ORDER BY id LIMIT 202")) {
    EXPECT_EQ(row[0].as<std::string>(), absl::StrCat(expected++));
  }
}

// The messages the server sends a connection (NOTICE, LOG), in order.
class Messages final : public pqxx::errorhandler {
 public:
  explicit Messages(pqxx::connection_base& conn) : pqxx::errorhandler(conn) {}
  bool operator()(const char message[]) noexcept override {
    all.emplace_back(message);
    return true;
  }
  std::vector<std::string> all;
};

// A keyed enqueue looks for its key's newest item (block_next_time) with
// one plan kept for every call (schema 21): planning it afresh each time
// was a third of an enqueue into an idle group. The plan auto_explain
// shows for it has the parameters in it (a custom plan would show the
// group's name as a constant), and reads the primary key backwards.
TEST_F(EnqueueFunctionTest, AKeyedEnqueueKeepsOnePlanForItsKeysNewestItem) {
  pqxx::connection conn(db_.dsn());
  Messages messages(conn);
  pqxx::nontransaction tx(conn);
  tx.exec("LOAD 'auto_explain'");
  tx.exec("SET auto_explain.log_min_duration = 0");
  tx.exec("SET auto_explain.log_nested_statements = on");
  tx.exec("SET client_min_messages = log");
  // Past the five custom plans PL/pgSQL makes before it weighs a generic
  // one; each call a key of its own, as a stream of new keys is.
  for (int i = 0; i < 8; ++i) {
    EnqueueOne(tx, kGroup, absl::StrCat("key-", i), "p");
  }
  std::vector<std::string> plans;
  for (const std::string& m : messages.all) {
    if (absl::StrContains(m, "sqlgroup.id_time(i.id)")) plans.push_back(m);
  }
  ASSERT_EQ(plans.size(), 8u) << absl::StrJoin(messages.all, "\n");
  for (const std::string& plan : plans) {
    EXPECT_THAT(plan, HasSubstr("Index Scan Backward using items_pkey"))
        << plan;
    EXPECT_THAT(plan, HasSubstr("(group_name = $1)")) << plan;
  }
}

TEST_F(EnqueueFunctionTest, AKeysNextItemSortsAfterItsNewestWhateverTheClock) {
  // The key's newest item is an hour ahead of the database clock (a clock
  // set back, a failover to a server behind): later items still follow it,
  // one microsecond apart, and other keys keep the clock's time.
  const uint64_t block = KeyBlock("k");
  const uint64_t ahead =
      static_cast<uint64_t>(absl::ToUnixMicros(absl::Now() + absl::Hours(1)));
  {
    pqxx::work tx(*conn_);
    tx.exec_params(
        "INSERT INTO sqlgroup.items (group_name, id, key) "
        "VALUES ($1, $2::uuid, 'k')",
        kGroup, FormatUuid(KeyedItemId(block, ahead, 0xfff)));
    tx.commit();
  }
  pqxx::work tx(*conn_);
  std::vector<Uuid128> ids = {EnqueueOne(tx, kGroup, "k", "1")};
  const std::vector<Uuid128> bulk =
      EnqueueBulk(tx, kGroup, {"k", "other", "k"}, {"2", "x", "3"});
  ASSERT_EQ(bulk.size(), 3u);
  ids.push_back(bulk[0]);
  ids.push_back(bulk[2]);
  tx.commit();
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(Low64(ids[i]) >> kKeyedNoiseBits, ahead + 1 + i) << i;
  }
  EXPECT_LT(Low64(bulk[1]) >> kKeyedNoiseBits, ahead - 3000000000ULL);
}

TEST_F(EnqueueFunctionTest, TheBulkFormKeepsArrayOrderPerKeyAndPayloads) {
  std::vector<std::optional<std::string>> keys, payloads;
  for (int i = 0; i < 300; ++i) {
    const int k = i % 7;
    keys.push_back(k == 6 ? std::nullopt
                          : std::optional<std::string>(absl::StrCat("k", k)));
    payloads.push_back(absl::StrCat("item ", i));
  }
  pqxx::work tx(*conn_);
  const std::vector<Uuid128> ids = EnqueueBulk(tx, kGroup, keys, payloads);
  const std::vector<Uuid128> more = EnqueueBulk(tx, kGroup, keys, payloads);
  tx.commit();
  ASSERT_EQ(ids.size(), 300u);
  ASSERT_EQ(more.size(), 300u);
  std::map<std::string, Uuid128> last;  // per key, over both calls
  for (const auto* call : {&ids, &more}) {
    for (size_t i = 0; i < call->size(); ++i) {
      if (!keys[i]) continue;
      auto it = last.find(*keys[i]);
      if (it != last.end()) {
        EXPECT_LT(it->second, (*call)[i]) << i;
      }
      last[*keys[i]] = (*call)[i];
    }
  }
  // Each id came back in the place of its own item.
  pqxx::nontransaction check(*conn_);
  for (size_t i = 0; i < ids.size(); ++i) {
    const pqxx::row row = check.exec_params1(
        "SELECT key, convert_from(payload, 'UTF8'), not_before = '-infinity' "
        "FROM sqlgroup.items WHERE group_name = $1 AND id = $2::uuid",
        kGroup, FormatUuid(ids[i]));
    EXPECT_EQ(row[0].is_null()
                  ? std::nullopt
                  : std::optional<std::string>(row[0].as<std::string>()),
              keys[i]);
    EXPECT_EQ(row[1].as<std::string>(), *payloads[i]);
    EXPECT_TRUE(row[2].as<bool>());
  }
}

TEST_F(EnqueueFunctionTest, UnkeyedIdsAreLaidOutAsTheCppOnesOverAllParts) {
  for (int parts : {1, 3, 16, 40, 4096}) {
    SCOPED_TRACE(absl::StrCat(parts, " parts"));
    const std::string group = absl::StrCat("u", parts);
    ASSERT_TRUE(admin_->CreateGroup({.name = group, .parts = parts}).ok());
    // Twice as many items as parts: dealt in runs of two from a random
    // part, they cover every part twice.
    const size_t count = std::max(2 * parts, 20);
    std::vector<std::optional<std::string>> keys(count), payloads(count, "u");
    pqxx::work tx(*conn_);
    const std::vector<Uuid128> ids = EnqueueBulk(tx, group, keys, payloads);
    std::vector<Uuid128> singles;
    for (int i = 0; i < 40; ++i) {
      singles.push_back(EnqueueOne(tx, group, std::nullopt, "s"));
    }
    tx.commit();
    ASSERT_EQ(ids.size(), count);
    std::map<int, std::vector<Uuid128>> by_part;
    for (const Uuid128 id : ids) by_part[PartOf(id, parts)].push_back(id);
    EXPECT_EQ(static_cast<int>(by_part.size()), parts);
    for (const auto& [part, part_ids] : by_part) {
      // One call's ids of a part rise in array order.
      EXPECT_TRUE(std::is_sorted(part_ids.begin(), part_ids.end())) << part;
    }
    // The C++ layout: ItemId of the same part, time and noise.
    const uint64_t now = static_cast<uint64_t>(absl::ToUnixMicros(absl::Now()));
    std::set<int> single_parts;
    using Ids = const std::vector<Uuid128>;
    for (Ids* call : std::initializer_list<Ids*>{&ids, &singles}) {
      for (const Uuid128 id : *call) {
        const int part = PartOf(id, parts);
        if (call == &singles) single_parts.insert(part);
        const KeyRange range = PartRange(part, parts);
        int width = 127;
        while ((Uuid128(1) << width) > range.last - range.first) --width;
        const int noise_bits = width - kItemTimeBits;
        const Uuid128 offset = id - range.first;
        const uint64_t time = absl::Uint128Low64(offset >> noise_bits);
        EXPECT_NEAR(static_cast<double>(time), static_cast<double>(now), 60e6);
        EXPECT_EQ(ItemId(part, parts, time, offset), id);
      }
    }
    if (parts > 1) {
      EXPECT_GT(single_parts.size(), 1u) << "single calls all went to one part";
    }
  }
}

TEST_F(EnqueueFunctionTest, DelayedItemsWaitAndCarryTheirDueTime) {
  pqxx::work tx(*conn_);
  EnqueueBulk(tx, kGroup, {"a", std::nullopt}, {"x", "y"}, "2 minutes");
  tx.exec_params("SELECT sqlgroup.enqueue($1, 'b', 'z'::bytea, '1 hour')",
                 kGroup);
  tx.commit();
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.items WHERE not_before "
                  "BETWEEN clock_timestamp() + interval '100 seconds' AND "
                  "clock_timestamp() + interval '2 minutes'"),
            2);
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.items WHERE not_before "
                  "> clock_timestamp() + interval '59 minutes'"),
            1);
}

TEST_F(EnqueueFunctionTest, AnIdTakenByAnotherProducerIsRetriedWithFreshBits) {
  // Key k's next times are T+1, T+2, ... (its newest item is at T, an hour
  // ahead), and for each of them half of the 4096 ids are taken by rows the
  // time probe passes over (unkeyed ones: as if another producer had
  // raced). Each new item then collides half the time and must retry.
  const uint64_t block = KeyBlock("k");
  const uint64_t t0 =
      static_cast<uint64_t>(absl::ToUnixMicros(absl::Now() + absl::Hours(1)));
  {
    pqxx::work tx(*conn_);
    tx.exec_params(
        "INSERT INTO sqlgroup.items (group_name, id, key) "
        "VALUES ($1, $2::uuid, 'k')",
        kGroup, FormatUuid(KeyedItemId(block, t0, 0)));
    tx.exec_params(
        "INSERT INTO sqlgroup.items (group_name, id) "
        "SELECT $1, sqlgroup.id_of(sqlgroup.signed64($2::numeric), "
        "  (($3::bigint + t) << 12) | (2 * n)) "
        "FROM generate_series(1, 21) t, generate_series(0, 2047) n",
        kGroup, std::to_string(block), t0);
    tx.commit();
  }
  pqxx::work tx(*conn_);
  std::vector<Uuid128> ids =
      EnqueueBulk(tx, kGroup, std::vector<std::optional<std::string>>(20, "k"),
                  std::vector<std::optional<std::string>>(20, "p"));
  ids.push_back(EnqueueOne(tx, kGroup, "k", "p"));
  tx.commit();
  ASSERT_EQ(ids.size(), 21u);
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(Low64(ids[i]) >> kKeyedNoiseBits, t0 + 1 + i) << i;
    EXPECT_EQ(Low64(ids[i]) & 1, 1u) << "took an id already taken";
  }
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.items WHERE payload = 'p'"),
            21);
}

TEST_F(EnqueueFunctionTest, AProducerRoleEnqueuesFromPlainSqlAfterGrant) {
  TestRole producer, member;
  TestDatabase db;  // after the roles: dropped first
  auto admin = testing::MigratedAdmin(db.dsn());
  ASSERT_NE(admin, nullptr);
  ASSERT_TRUE(admin->CreateGroup({.name = kGroup, .parts = 4}).ok());
  const absl::Status granted = admin->GrantRoles(
      {.member_role = member.name(), .producer_role = producer.name()});
  ASSERT_TRUE(granted.ok()) << granted;
  {
    pqxx::connection conn(producer.Dsn(db.name()));
    pqxx::work tx(conn);
    EXPECT_EQ(absl::Uint128High64(EnqueueOne(tx, kGroup, "key", "one")),
              KeyBlock("key"));
    EXPECT_EQ(
        EnqueueBulk(tx, kGroup, {"key", std::nullopt}, {"two", "three"}).size(),
        2u);
    tx.commit();
  }
  pqxx::connection check(db.dsn());
  pqxx::nontransaction read(check);
  EXPECT_EQ(read.exec1("SELECT count(*) FROM sqlgroup.items")[0].as<int>(), 3);
  // Neither the helpers nor, for a member, enqueue itself.
  const std::vector<std::pair<std::string, std::string>> refused = {
      {producer.Dsn(db.name()), "SELECT sqlgroup.key_block('k')"},
      {producer.Dsn(db.name()), "SELECT sqlgroup.unkeyed_id(0, 1, 0)"},
      {member.Dsn(db.name()), "SELECT sqlgroup.enqueue('g', 'k', 'x'::bytea)"},
      {member.Dsn(db.name()),
       "SELECT sqlgroup.enqueue_many('g', ARRAY['k'], ARRAY['x'::bytea])"},
  };
  for (const auto& [dsn, sql] : refused) {
    pqxx::connection conn(dsn);
    pqxx::work tx(conn);
    try {
      tx.exec(sql);
      ADD_FAILURE() << "allowed: " << sql;
    } catch (const pqxx::sql_error& e) {
      EXPECT_THAT(e.what(), HasSubstr("permission denied")) << sql;
    }
  }
  EXPECT_EQ(read.exec1("SELECT count(*) FROM sqlgroup.items")[0].as<int>(), 3);
}

TEST_F(EnqueueFunctionTest, BadInputIsRefusedWithItsReasonAndEnqueuesNothing) {
  {
    pqxx::work tx(*conn_);
    EnqueueOne(tx, kGroup, "before", "x");
    tx.commit();
  }
  const std::string big(1048577, 'x');
  struct Case {
    std::string sql;
    std::string sqlstate;
    std::string message;
  };
  const std::string ok_bulk = "ARRAY['a', 'b'], ARRAY['1', '2']::bytea[]";
  const std::vector<Case> cases = {
      {"SELECT sqlgroup.enqueue('nope', 'k', 'x'::bytea)", "42704",
       "consumer group 'nope' does not exist; create it with `sqlgroup "
       "group create nope --parts P`"},
      {"SELECT * FROM sqlgroup.enqueue_many('nope', " + ok_bulk + ")", "42704",
       "consumer group 'nope' does not exist"},
      {"SELECT sqlgroup.enqueue(NULL, 'k', 'x'::bytea)", "22004",
       "the group name is NULL"},
      {"SELECT * FROM sqlgroup.enqueue_many(NULL, " + ok_bulk + ")", "22004",
       "the group name is NULL"},
      {"SELECT sqlgroup.enqueue('g', 'k', NULL::bytea)", "22004",
       "the payload of item 1 is NULL; pass ''::bytea for an empty one"},
      {"SELECT * FROM sqlgroup.enqueue_many('g', ARRAY['a', 'b', 'c'], "
       "ARRAY['1', NULL, '3']::bytea[])",
       "22004", "the payload of item 2 is NULL"},
      {"SELECT sqlgroup.enqueue('g', 'k', repeat('x', 1048577)::bytea)",
       "22023",
       "item 1 has a payload of 1048577 bytes, more than the limit of "
       "1048576"},
      {"SELECT * FROM sqlgroup.enqueue_many('g', ARRAY['a', NULL], "
       "ARRAY['1'::bytea, repeat('x', 1048577)::bytea])",
       "22023", "item 2 has a payload of 1048577 bytes"},
      {"SELECT sqlgroup.enqueue('g', 'k', 'x'::bytea, '-1 second')", "22023",
       "the delay -00:00:01 is negative"},
      {"SELECT * FROM sqlgroup.enqueue_many('g', " + ok_bulk + ", '-1 day')",
       "22023", "is negative"},
      {"SELECT sqlgroup.enqueue('g', 'k', 'x'::bytea, NULL)", "22004",
       "the delay is NULL"},
      {"SELECT * FROM sqlgroup.enqueue_many('g', ARRAY['a', 'b', 'c'], "
       "ARRAY['1', '2']::bytea[])",
       "22023",
       "keys has 3 elements and payloads 2; pass one key (or NULL) per "
       "payload"},
      {"SELECT * FROM sqlgroup.enqueue_many('g', NULL::text[], "
       "ARRAY['1']::bytea[])",
       "22004", "keys or payloads is NULL"},
  };
  const int64_t before = Count("SELECT count(*) FROM sqlgroup.items");
  for (const Case& c : cases) {
    SCOPED_TRACE(c.sql);
    pqxx::work tx(*conn_);
    try {
      tx.exec(c.sql);
      ADD_FAILURE() << "accepted";
    } catch (const pqxx::sql_error& e) {
      EXPECT_EQ(e.sqlstate(), c.sqlstate) << e.what();
      EXPECT_THAT(e.what(), HasSubstr(c.message));
      EXPECT_THAT(e.what(), HasSubstr("nothing was enqueued"));
    }
  }
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.items"), before);
  // The limit itself is allowed, and so is an empty call.
  pqxx::work tx(*conn_);
  EXPECT_EQ(tx.exec("SELECT * FROM sqlgroup.enqueue_many('g', ARRAY[]::text[], "
                    "ARRAY[]::bytea[])")
                .size(),
            0u);
  tx.exec("SELECT sqlgroup.enqueue('g', 'k', repeat('x', 1048576)::bytea)");
  // An untyped literal payload needs no cast: the bulk form has its own
  // name, so the call is not ambiguous.
  tx.exec("SELECT sqlgroup.enqueue('g', 'k', 'plain text')");
  tx.commit();
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.items"), before + 2);
}

TEST_F(EnqueueFunctionTest, ACallSaysWhereItsItemsAre) {
  pqxx::connection listener(db_.dsn());
  Announcements announcements(listener);
  std::vector<std::string> ids;
  {
    pqxx::work tx(*conn_);
    ids.push_back(FormatUuid(EnqueueOne(tx, kGroup, "a", "x")));
    tx.commit();
  }
  {
    pqxx::work tx(*conn_);
    for (Uuid128 id :
         EnqueueBulk(tx, kGroup, {"b", std::nullopt}, {"1", "2"})) {
      ids.push_back(FormatUuid(id));
    }
    tx.commit();
  }
  EXPECT_EQ(announcements.Heard(*conn_),
            (std::vector<std::string>{
                store::ItemsArrivedIn(kGroup, {ids[0]}),
                store::ItemsArrivedIn(kGroup, {ids[1], ids[2]})}));
}

TEST_F(EnqueueFunctionTest, ATransactionOfManyCallsWakesTheMembersBoundedly) {
  pqxx::connection listener(db_.dsn());
  Announcements announcements(listener);
  std::vector<std::string> ids;
  {
    pqxx::work tx(*conn_);
    for (const pqxx::row& row : tx.exec_params(
             "SELECT sqlgroup.enqueue($1, 'k' || (i % 10), 'x'::bytea)::text "
             "FROM generate_series(1, 1000) i ORDER BY i",
             kGroup)) {
      ids.push_back(row[0].as<std::string>());
    }
    EnqueueBulk(tx, kGroup, {"a", std::nullopt}, {"1", "2"});
    tx.commit();
  }
  // The first calls say where their items are; then one plain
  // announcement for all the rest (PostgreSQL folds the repeats).
  std::vector<std::string> expected;
  for (int i = 0; i < store::kMaxTargetedAnnouncements; ++i) {
    const std::string payload = store::ItemsArrivedIn(kGroup, {ids[i]});
    if (std::find(expected.begin(), expected.end(), payload) ==
        expected.end()) {
      expected.push_back(payload);
    }
  }
  expected.push_back(store::ItemsArrived(kGroup));
  EXPECT_EQ(announcements.Heard(*conn_), expected);
  {
    // Delayed items announce when they fall due, as the C++ producer does.
    pqxx::work tx(*conn_);
    tx.exec_params(
        "SELECT sqlgroup.enqueue($1, NULL, 'x'::bytea, '2.5 seconds') "
        "FROM generate_series(1, 100) i",
        kGroup);
    tx.commit();
  }
  EXPECT_EQ(announcements.Heard(*conn_),
            std::vector<std::string>{
                store::ItemsDueIn(kGroup, absl::Milliseconds(2500))});
  {
    // A failed call announces nothing.
    pqxx::work tx(*conn_);
    EXPECT_THROW(tx.exec("SELECT sqlgroup.enqueue('nope', 'k', 'x'::bytea)"),
                 pqxx::sql_error);
  }
  EXPECT_TRUE(announcements.Heard(*conn_).empty());
}

}  // namespace
}  // namespace sqlgroup
