// Embeds sqlgroup: a private PostgreSQL, a group, 100 items, and one
// consumer that writes a result row per item in the acknowledging
// transaction. Exits 0 when all 100 were acknowledged exactly once.
#include <cstdio>
#include <pqxx/pqxx>

#include "absl/time/clock.h"
#include "sqlgroup/admin.h"
#include "sqlgroup/consumer.h"
#include "sqlgroup/private_postgres.h"
#include "sqlgroup/producer.h"

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "example: %s\n", s.ToString().c_str());
  return 1;
}

int main() {
  auto pg = sqlgroup::PrivatePostgres::Start({.durable = false});
  if (!pg.ok()) return Fail(pg.status());
  const std::string dsn = (*pg)->Dsn();

  auto admin = sqlgroup::Admin::Connect({.dsn = dsn});
  if (!admin.ok()) return Fail(admin.status());
  if (auto m = (*admin)->Migrate(); !m.ok()) return Fail(m.status());
  if (auto s = (*admin)->CreateGroup({.name = "example", .parts = 4});
      !s.ok()) {
    return Fail(s);
  }
  pqxx::connection conn(dsn);
  {
    pqxx::work tx(conn);
    tx.exec("CREATE TABLE results (id uuid, payload text)");
    tx.commit();
  }

  auto producer = sqlgroup::Producer::Create({.dsn = dsn, .group = "example"});
  if (!producer.ok()) return Fail(producer.status());
  std::vector<sqlgroup::NewItem> items(100);
  for (int i = 0; i < 100; ++i) items[i].payload = "item " + std::to_string(i);
  if (auto ids = (*producer)->Enqueue(items); !ids.ok()) {
    return Fail(ids.status());
  }

  sqlgroup::ConsumerOptions options;
  options.dsn = dsn;
  options.group = "example";
  options.handler = [](const sqlgroup::Item& item,
                       sqlgroup::AckTransaction& ack) {
    ack.work().exec_params("INSERT INTO results VALUES ($1::uuid, $2)", item.id,
                           item.payload);
    return absl::OkStatus();
  };
  auto consumer = sqlgroup::Consumer::Create(std::move(options));
  if (!consumer.ok()) return Fail(consumer.status());
  if (auto s = (*consumer)->Start(); !s.ok()) return Fail(s);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while ((*consumer)->stats().acked < 100 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  if (auto s = (*consumer)->Stop(); !s.ok()) return Fail(s);

  pqxx::nontransaction tx(conn);
  const auto row = tx.exec1("SELECT count(*), count(DISTINCT id) FROM results");
  std::printf("example: %d results, %d distinct, %lld acknowledged\n",
              row[0].as<int>(), row[1].as<int>(),
              static_cast<long long>((*consumer)->stats().acked));
  return row[0].as<int>() == 100 && row[1].as<int>() == 100 ? 0 : 1;
}
