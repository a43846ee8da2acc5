#include "common.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <pqxx/pqxx>
#include <stdexcept>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "item_ids.h"

namespace sqlgroup::bench {

Flags::Flags(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) continue;
    arg = arg.substr(2);
    const size_t eq = arg.find('=');
    if (eq == std::string::npos) {
      values_[arg] = "true";
    } else {
      values_[arg.substr(0, eq)] = arg.substr(eq + 1);
    }
  }
}

std::string Flags::Str(const std::string& name, const std::string& def) const {
  auto it = values_.find(name);
  return it == values_.end() ? def : it->second;
}

int64_t Flags::Int(const std::string& name, int64_t def) const {
  auto it = values_.find(name);
  return it == values_.end() ? def : std::stoll(it->second);
}

double Flags::Double(const std::string& name, double def) const {
  auto it = values_.find(name);
  return it == values_.end() ? def : std::stod(it->second);
}

bool Flags::Bool(const std::string& name, bool def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  return it->second == "true" || it->second == "1";
}

void SetUpSchema(const std::string& dsn) {
  pqxx::connection conn(dsn);
  pqxx::work tx(conn);
  tx.exec("CREATE SCHEMA IF NOT EXISTS sqlgroup_bench");
  // Same columns and storage settings as sqlgroup.items; the primary key is
  // the only index, which is all the baseline's query and the limit's
  // deletes need.
  for (const char* table : {kSkipTable, kLimitTable}) {
    tx.exec(absl::StrCat("CREATE TABLE IF NOT EXISTS ", table,
                         " (LIKE sqlgroup.items INCLUDING DEFAULTS, "
                         "PRIMARY KEY (group_name, id)) WITH (fillfactor = 80, "
                         "autovacuum_vacuum_scale_factor = 0.01, "
                         "autovacuum_vacuum_threshold = 1000, "
                         "autovacuum_vacuum_insert_scale_factor = 0.05, "
                         "autovacuum_analyze_scale_factor = 0.02, "
                         "autovacuum_vacuum_cost_delay = 0)"));
  }
  tx.commit();
}

std::unique_ptr<pqxx::connection> Connect(const std::string& dsn,
                                          const std::string& app_name) {
  auto conn = std::make_unique<pqxx::connection>(dsn);
  pqxx::nontransaction tx(*conn);
  tx.exec(absl::StrCat("SET application_name = ", tx.quote(app_name)));
  return conn;
}

int64_t CountItems(pqxx::connection& conn, const std::string& table,
                   const std::string& group) {
  pqxx::nontransaction tx(conn);
  return tx
      .exec_params1(absl::StrCat("SELECT count(*) FROM ", table,
                                 " WHERE group_name = $1"),
                    group)[0]
      .as<int64_t>();
}

IdLayout ParseIdLayout(const std::string& name) {
  if (name == "producer") return IdLayout::kProducer;
  if (name == "interleaved") return IdLayout::kInterleaved;
  if (name == "random") return IdLayout::kRandom;
  throw std::runtime_error(
      "--layout must be producer, interleaved or random, got " + name);
}

int64_t TopUp(pqxx::connection& conn, const std::string& table,
              const std::string& group, int parts, int64_t target,
              IdLayout layout) {
  const int64_t have = CountItems(conn, table, group);
  ItemIdGenerator ids(layout == IdLayout::kInterleaved ? 1 : kMaxPartRun);
  absl::BitGen gen;
  int64_t added = 0;
  constexpr int64_t kChunk = 500000;
  constexpr int64_t kStatement = 10000;  // ids per array parameter
  while (have + added < target) {
    const int64_t n = std::min(kChunk, target - have - added);
    pqxx::work tx(conn);
    for (int64_t done = 0; done < n; done += kStatement) {
      // One statement's ids are one call of the producer's.
      const int64_t m = std::min(n - done, kStatement);
      std::vector<Uuid128> batch;
      if (layout == IdLayout::kRandom) {
        for (int64_t i = 0; i < m; ++i) {
          batch.push_back(absl::MakeUint128(absl::Uniform<uint64_t>(gen),
                                            absl::Uniform<uint64_t>(gen)));
        }
      } else {
        batch =
            ids.Next(parts, static_cast<size_t>(m),
                     static_cast<uint64_t>(absl::ToUnixMicros(absl::Now())));
      }
      std::string array = "{";
      for (size_t i = 0; i < batch.size(); ++i) {
        absl::StrAppend(&array, i == 0 ? "" : ",", FormatUuid(batch[i]));
      }
      array += "}";
      tx.exec_params(
          absl::StrCat("INSERT INTO ", table,
                       " (group_name, id, key, payload) "
                       "SELECT $1, x.id, NULL, "
                       "'\\x00112233445566778899aabbccddeeff'::bytea "
                       "FROM unnest($2::uuid[]) AS x(id)"),
          group, array);
    }
    tx.commit();
    added += n;
  }
  // Always, not only after adding rows: the index entries of the rows the
  // last run deleted are dead until a vacuum, and a run that starts on
  // them walks hundreds of thousands of them per scan from where they
  // begin (the SKIP LOCKED queue's every pick: 33-100 ms each instead of
  // 0.1, 873 items/s instead of 7,000, session 17). Every system starts
  // from a vacuumed table.
  pqxx::nontransaction tx(conn);
  tx.exec(absl::StrCat("VACUUM ANALYZE ", table));
  return added;
}

double Quantile(std::vector<double>& v, double q) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

JsonLine& JsonLine::Add(const std::string& key, const std::string& value) {
  fields_.emplace_back(key, JsonString(value));
  return *this;
}
JsonLine& JsonLine::Add(const std::string& key, const char* value) {
  return Add(key, std::string(value));
}
JsonLine& JsonLine::Add(const std::string& key, double value) {
  fields_.emplace_back(key, std::isfinite(value)
                                ? absl::StrFormat("%.4f", value)
                                : std::string("null"));
  return *this;
}
JsonLine& JsonLine::Add(const std::string& key, int64_t value) {
  fields_.emplace_back(key, absl::StrCat(value));
  return *this;
}
JsonLine& JsonLine::Add(const std::string& key, int value) {
  return Add(key, static_cast<int64_t>(value));
}
JsonLine& JsonLine::Add(const std::string& key, bool value) {
  fields_.emplace_back(key, value ? "true" : "false");
  return *this;
}
JsonLine& JsonLine::Raw(const std::string& key, const std::string& json) {
  fields_.emplace_back(key, json);
  return *this;
}

void JsonLine::Print() const {
  std::string out = "{";
  for (size_t i = 0; i < fields_.size(); ++i) {
    absl::StrAppend(&out, i ? ", " : "", JsonString(fields_[i].first), ": ",
                    fields_[i].second);
  }
  std::printf("%s}\n", out.c_str());
  std::fflush(stdout);
}

}  // namespace sqlgroup::bench
