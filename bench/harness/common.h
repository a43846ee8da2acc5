// Shared pieces of the benchmark harness: flags, connections, backlog
// loading, percentiles and the one-JSON-line-per-result output.
#ifndef SQLGROUP_BENCH_HARNESS_COMMON_H_
#define SQLGROUP_BENCH_HARNESS_COMMON_H_

#include <cstdint>
#include <map>
#include <memory>
#include <pqxx/connection>
#include <string>
#include <utility>
#include <vector>

namespace sqlgroup::bench {

// --name=value flags after the subcommand; a bare --name is "true".
class Flags {
 public:
  Flags(int argc, char** argv, int first);
  std::string Str(const std::string& name, const std::string& def) const;
  int64_t Int(const std::string& name, int64_t def) const;
  double Double(const std::string& name, double def) const;
  bool Bool(const std::string& name, bool def) const;

 private:
  std::map<std::string, std::string> values_;
};

// The harness's own tables, with sqlgroup.items' columns and storage
// settings, so every queue pays for the same row shape.
inline constexpr char kSkipTable[] = "sqlgroup_bench.skip_items";
inline constexpr char kLimitTable[] = "sqlgroup_bench.limit_items";
inline constexpr char kItemsTable[] = "sqlgroup.items";

// Creates sqlgroup_bench's tables (idempotent). The sqlgroup schema must be
// migrated already.
void SetUpSchema(const std::string& dsn);

std::unique_ptr<pqxx::connection> Connect(const std::string& dsn,
                                          const std::string& app_name);

// Rows of `group` in `table` (an index-only count).
int64_t CountItems(pqxx::connection& conn, const std::string& table,
                   const std::string& group);

// How TopUp chooses ids (10,000 a statement): as the producer does for a
// call of that many (item_ids.h: runs of 64 items in one part), with runs
// of one item (kInterleaved: the parts' rows alternate in the heap, as
// from many producers enqueuing one item at a time, and as the producer
// laid out any call before session 8), or uniformly at random (UUIDs made
// elsewhere, e.g. gen_random_uuid()).
enum class IdLayout { kProducer, kInterleaved, kRandom };

// The layout named `name` (producer, interleaved, random); throws on
// another name.
IdLayout ParseIdLayout(const std::string& name);

// Inserts rows into `table` until `group` has at least `target`, in
// transactions of at most 500,000 rows, then VACUUM ANALYZEs the table
// (always: see there). Small payloads (16 bytes), no keys (the ids are the
// producer's for unkeyed items: with keys, each item would be a key of its
// own, which no producer makes; bench/harness/keyed.cc loads keyed items
// through the Producer), ids of `layout` for a group of `parts` parts.
// Returns the number of rows added.
int64_t TopUp(pqxx::connection& conn, const std::string& table,
              const std::string& group, int parts, int64_t target,
              IdLayout layout = IdLayout::kProducer);

// The value at quantile q (0..1) of `v` (sorted in place).
double Quantile(std::vector<double>& v, double q);

// A flat JSON object built field by field, printed as one line.
class JsonLine {
 public:
  JsonLine& Add(const std::string& key, const std::string& value);
  JsonLine& Add(const std::string& key, const char* value);
  JsonLine& Add(const std::string& key, double value);
  JsonLine& Add(const std::string& key, int64_t value);
  JsonLine& Add(const std::string& key, int value);
  JsonLine& Add(const std::string& key, bool value);
  JsonLine& Raw(const std::string& key, const std::string& json);
  void Print() const;

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

std::string JsonString(const std::string& s);

}  // namespace sqlgroup::bench

#endif  // SQLGROUP_BENCH_HARNESS_COMMON_H_
