#include "cli/handlers/handler_spec.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <pqxx/pqxx>
#include <thread>

#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cli/handlers/exec_handler.h"
#include "cli/handlers/http_handler.h"
#include "cli/handlers/sql_handler.h"
#include "cli/numbered_items.h"
#include "status_macros.h"
#include "store/connection.h"
#include "store/errors.h"
#include "store/function_ack.h"

namespace sqlgroup::cli {
namespace {

// Tables made by older versions get the newer columns (last, as in a
// table made now).
constexpr char kDemoTablesSql[] =
    "CREATE SCHEMA IF NOT EXISTS sqlgroup_demo;"
    // last_seq: the sequence number of the key's newest counted item;
    // order_violations: counted items whose number was not last_seq + 1.
    "CREATE TABLE IF NOT EXISTS sqlgroup_demo.counters "
    "  (key text PRIMARY KEY, n bigint NOT NULL, last_seq bigint, "
    "   order_violations bigint NOT NULL DEFAULT 0);"
    "ALTER TABLE sqlgroup_demo.counters "
    "  ADD COLUMN IF NOT EXISTS last_seq bigint, "
    "  ADD COLUMN IF NOT EXISTS order_violations bigint NOT NULL DEFAULT 0;"
    "CREATE TABLE IF NOT EXISTS sqlgroup_demo.produced "
    "  (key text PRIMARY KEY, n bigint NOT NULL);"
    // No unique constraint, on purpose: an item acknowledged twice shows as
    // two rows instead of being hidden by an error. delivered_at: when the
    // member handed the item to the handler (its clock).
    "CREATE TABLE IF NOT EXISTS sqlgroup_demo.results "
    "  (item_id uuid NOT NULL, key text, session_id uuid NOT NULL, "
    "   part integer NOT NULL, epoch bigint NOT NULL, "
    "   acked_at timestamptz NOT NULL DEFAULT clock_timestamp(), "
    "   payload bytea, delivered_at timestamptz);"
    "ALTER TABLE sqlgroup_demo.results ADD COLUMN IF NOT EXISTS payload bytea, "
    "  ADD COLUMN IF NOT EXISTS delivered_at timestamptz, "
    "  ADD COLUMN IF NOT EXISTS group_name text";

// Which of results' newer columns are there: 1 delivered_at (0.19 on), 2
// group_name (0.20 on), or both (3). The record handler writes those.
constexpr char kResultsNewerColumnsSql[] =
    "SELECT coalesce(sum(CASE a.attname WHEN 'delivered_at' THEN 1 ELSE 2 "
    "END), 0)::int FROM pg_catalog.pg_attribute a "
    "WHERE NOT a.attisdropped "
    "AND a.attrelid = to_regclass('sqlgroup_demo.results') "
    "AND a.attname IN ('delivered_at', 'group_name')";
constexpr int kDeliveredAt = 1;
constexpr int kGroupName = 2;

// Whether the tables of kDemoTablesSql are there with the columns the
// handlers cannot do without (delivered_at and group_name are not).
constexpr char kDemoTablesUsableSql[] =
    "SELECT to_regclass('sqlgroup_demo.produced') IS NOT NULL "
    "AND (SELECT count(*) FROM pg_catalog.pg_attribute a "
    "     WHERE NOT a.attisdropped AND ("
    "       (a.attrelid = to_regclass('sqlgroup_demo.counters') "
    "        AND a.attname IN ('last_seq', 'order_violations')) "
    "       OR (a.attrelid = to_regclass('sqlgroup_demo.results') "
    "        AND a.attname = 'payload'))) = 3";

// One statement: count the item, and when its payload is numbered (see
// numbered_items.h), check the number follows the key's last one. $1 key,
// $2 the item's sequence number or NULL.
constexpr char kCountSql[] =
    "INSERT INTO sqlgroup_demo.counters AS c "
    "  (key, n, last_seq, order_violations) "
    "VALUES ($1, 1, $2::bigint, CASE WHEN $2::bigint <> 1 THEN 1 ELSE 0 END) "
    "ON CONFLICT (key) DO UPDATE SET n = c.n + 1, "
    "  order_violations = c.order_violations + "
    "    CASE WHEN EXCLUDED.last_seq <> coalesce(c.last_seq, 0) + 1 "
    "    THEN 1 ELSE 0 END, "
    "  last_seq = coalesce(EXCLUDED.last_seq, c.last_seq)";

absl::Status BadSpec(const std::string& text, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "--handler=", text, ": ", why,
      "; use sql:STATEMENT or sql:FUNCTION (e.g. sql:app.handle_item), "
      "exec:'CMD ARGS' (e.g. exec:'python3 worker.py'), an http:// or "
      "https:// URL, or a demo handler: noop, count, count:DURATION, record, "
      "record:DURATION, sleep:DURATION (e.g. sleep:20ms) or fail:RATE "
      "(e.g. fail:0.1)"));
}

// A failure with probability `rate` (--fail_rate), before the handler
// runs, so before it writes anything.
absl::Status InjectedFailure(double rate, const Item& item) {
  static thread_local absl::BitGen gen;
  if (rate <= 0 || !absl::Bernoulli(gen, rate)) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("injected failure (--fail_rate=", rate,
                   ") before the handler ran, on attempt ", item.attempt));
}

}  // namespace

absl::StatusOr<HandlerSpec> ParseHandlerSpec(const std::string& text) {
  HandlerSpec spec;
  spec.given = text;
  if (text.rfind("http://", 0) == 0 || text.rfind("https://", 0) == 0) {
    RETURN_IF_ERROR(CheckHttpUrl(text));
    spec.kind = HandlerSpec::Kind::kHttp;
    spec.target = text;
    return spec;
  }
  const size_t colon = text.find(':');
  const std::string name = text.substr(0, colon);
  const std::string arg =
      colon == std::string::npos ? "" : text.substr(colon + 1);
  if (name == "noop") {
    if (colon != std::string::npos) return BadSpec(text, "takes no argument");
    return spec;
  }
  if (name == "count" || name == "record") {
    spec.kind = name == "count" ? HandlerSpec::Kind::kCount
                                : HandlerSpec::Kind::kRecord;
    if (colon != std::string::npos && (!absl::ParseDuration(arg, &spec.sleep) ||
                                       spec.sleep < absl::ZeroDuration())) {
      return BadSpec(text, absl::StrCat(name, ":DURATION needs a duration"));
    }
    return spec;
  }
  if (name == "sleep") {
    spec.kind = HandlerSpec::Kind::kSleep;
    if (!absl::ParseDuration(arg, &spec.sleep) ||
        spec.sleep < absl::ZeroDuration()) {
      return BadSpec(text, "needs a duration");
    }
    return spec;
  }
  if (name == "fail") {
    spec.kind = HandlerSpec::Kind::kFail;
    if (!absl::SimpleAtod(arg, &spec.fail_rate) || spec.fail_rate < 0 ||
        spec.fail_rate > 1) {
      return BadSpec(text, "needs a rate between 0 and 1");
    }
    return spec;
  }
  if (name == "sql") {
    spec.kind = HandlerSpec::Kind::kSql;
    spec.target = SqlStatementOf(arg);
    if (store::IsFunctionName(arg)) spec.function = arg;
    if (arg.find_first_not_of(" \t\n") == std::string::npos) {
      return BadSpec(text, "needs a statement or a function's name");
    }
    return spec;
  }
  if (name == "exec") {
    spec.kind = HandlerSpec::Kind::kExec;
    ASSIGN_OR_RETURN(spec.command, ParseExecCommand(arg));
    return spec;
  }
  return BadSpec(text, "unknown handler");
}

namespace {

// Whether sql:FUNCTION is called by the ack's statement (SqlFunction), or
// runs as a statement in the acknowledging transaction: when failures are
// injected before the handler (--fail_rate), and for a function that
// returns a set, which the ack's statement cannot call. A STRICT function
// of single items is refused either way: PostgreSQL skips its call for a
// NULL key.
absl::StatusOr<bool> CalledInTheAck(const HandlerSpec& spec,
                                    const HandlerContext& context) {
  if (spec.function.empty()) return false;
  ASSIGN_OR_RETURN(auto conn, store::Connect(context.dsn, {}));
  ASSIGN_OR_RETURN(const store::FunctionTraits traits,
                   store::GuardOr<store::FunctionTraits>(
                       "look up the handler's function", [&] {
                         pqxx::work tx(*conn);
                         return store::FunctionTraitsOf(
                             tx,
                             {.name = spec.function, .arrays = context.batch});
                       }));
  if (traits.strict && !context.batch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--handler=", spec.given, ": ", store::StrictRefusal(spec.function)));
  }
  return !traits.returns_set && context.fail_rate <= 0;
}

}  // namespace

absl::StatusOr<Handlers> BuildHandlers(const HandlerSpec& spec,
                                       const HandlerContext& context) {
  if (!context.headers_file.empty() && spec.kind != HandlerSpec::Kind::kHttp) {
    return absl::InvalidArgumentError(
        "--handler_headers adds headers to an http handler's requests; "
        "this --handler is not one");
  }
  Handlers out;
  Handler single;
  switch (spec.kind) {
    case HandlerSpec::Kind::kSql: {
      const SqlHandler sql{.statement = spec.target,
                           .batch = context.batch,
                           .given = spec.given};
      RETURN_IF_ERROR(CheckSqlHandler(context.dsn, sql));
      ASSIGN_OR_RETURN(const bool in_ack, CalledInTheAck(spec, context));
      if (in_ack) {
        out.sql_function = {.name = spec.function, .arrays = context.batch};
        return out;
      }
      if (context.batch) {
        BatchHandler batch = MakeSqlBatchHandler(sql);
        const double rate = context.fail_rate;
        // --fail_rate before the statement, as for single items.
        out.batch_handler = [batch, rate](const std::vector<Item>& items,
                                          AckTransaction& ack) {
          RETURN_IF_ERROR(InjectedFailure(rate, items.front()));
          return batch(items, ack);
        };
        return out;
      }
      single = MakeSqlHandler(sql);
      break;
    }
    case HandlerSpec::Kind::kExec:
      RETURN_IF_ERROR(
          CheckExecCommandStarts(spec.command, spec.given, absl::Seconds(1)));
      single = Interruptible(
          MakeExecHandler(spec.command, context.timeout, context.logger),
          context.calls);
      break;
    case HandlerSpec::Kind::kHttp: {
      std::vector<std::string> headers;
      if (!context.headers_file.empty()) {
        ASSIGN_OR_RETURN(headers, ReadHeaderFile(context.headers_file));
      }
      single = Interruptible(
          MakeHttpHandler(spec.target, context.timeout, std::move(headers)),
          context.calls);
      break;
    }
    case HandlerSpec::Kind::kSleep:
      single = Interruptible(MakeHandler(spec, context.group), context.calls);
      break;
    default:
      // A SQL statement is canceled at the statement cut-off instead, and
      // the other demos are quick.
      single = MakeHandler(spec, context.group);
  }
  single = WithInjectedFailures(std::move(single), context.fail_rate);
  if (context.batch) {
    out.batch_handler = [single](const std::vector<Item>& items,
                                 AckTransaction& ack) {
      for (const Item& item : items) RETURN_IF_ERROR(single(item, ack));
      return absl::OkStatus();
    };
  } else {
    out.handler = std::move(single);
  }
  return out;
}

absl::Status EnsureDemoTables(const std::string& dsn) {
  for (int attempt = 1;; ++attempt) {
    try {
      // Through store::Connect, so a failure names the target masked.
      auto conn = store::Connect(dsn, {});
      if (!conn.ok()) return conn.status();
      // Present already, newer columns included: a role that may not
      // create schemas or alter tables (a member role) can still use them.
      bool usable = false;
      {
        pqxx::nontransaction read(**conn);
        usable = read.exec1(kDemoTablesUsableSql)[0].as<bool>();
        if (usable && read.exec1(kResultsNewerColumnsSql)[0].as<int>() ==
                          (kDeliveredAt | kGroupName)) {
          return absl::OkStatus();
        }
      }
      try {
        pqxx::work tx(**conn);
        tx.exec(kDemoTablesSql);
        tx.commit();
      } catch (const pqxx::insufficient_privilege&) {
        // Made by an older version, and this role may not add the newer
        // columns: the record handler writes without them.
        if (usable) return absl::OkStatus();
        throw;
      }
      return absl::OkStatus();
    } catch (const pqxx::unique_violation& e) {
      // Another process created it meanwhile; the next try sees it.
      if (attempt == 3) {
        return absl::UnavailableError(absl::StrCat(
            "cannot create the demo tables (schema sqlgroup_demo): ",
            e.what()));
      }
    } catch (...) {
      // Classified as any other statement's error: a missing privilege is
      // permanent, not a database to wait for.
      const absl::Status s = store::StatusFromCurrentException(
          "create the demo tables (schema sqlgroup_demo) that produce "
          "--keys and the count and record handlers use");
      if (!absl::IsPermissionDenied(s)) return s;
      return absl::PermissionDeniedError(absl::StrCat(
          s.message(),
          ". Create them once as a role that may (run the same command as "
          "the schema's owner, e.g. the one that ran `sqlgroup migrate`), "
          "then this role uses them"));
    }
  }
}

Handler MakeHandler(const HandlerSpec& spec, const std::string& group) {
  switch (spec.kind) {
    case HandlerSpec::Kind::kNoop:
      return [](const Item&, AckTransaction&) { return absl::OkStatus(); };
    case HandlerSpec::Kind::kCount:
      return [d = spec.sleep](const Item& item, AckTransaction& ack) {
        ack.work().exec_params(kCountSql, item.key.value_or(""),
                               PayloadSequence(item.payload));
        // count:D holds the transaction (and the counter's row lock) open
        // for D: a wide window for fault tests to pause a member in.
        if (d > absl::ZeroDuration()) {
          std::this_thread::sleep_for(absl::ToChronoMicroseconds(d));
        }
        return absl::OkStatus();
      };
    case HandlerSpec::Kind::kRecord:
      // Which newer columns results has: -1 not known yet, read once.
      return [d = spec.sleep, group,
              columns = std::make_shared<std::atomic<int>>(-1)](
                 const Item& item, AckTransaction& ack) {
        const std::string delivered_at = absl::FormatTime(
            "%Y-%m-%d %H:%M:%E6S+00", absl::Now(), absl::UTCTimeZone());
        if (columns->load() < 0) {
          columns->store(
              ack.work().exec1(kResultsNewerColumnsSql)[0].as<int>());
        }
        const int has = columns->load();
        // Every parameter is read (a server refuses one it cannot type);
        // only the columns there are written.
        ack.work().exec_params(
            absl::StrCat("INSERT INTO sqlgroup_demo.results (item_id, key, "
                         "session_id, part, epoch, payload",
                         has & kDeliveredAt ? ", delivered_at" : "",
                         has & kGroupName ? ", group_name" : "",
                         ") SELECT $1::uuid, $2, $3::uuid, $4, $5, $6",
                         has & kDeliveredAt ? ", n.delivered_at" : "",
                         has & kGroupName ? ", n.group_name" : "",
                         " FROM (SELECT $7::timestamptz AS delivered_at, "
                         "$8::text AS group_name) n"),
            item.id, item.key, item.session, item.part, item.epoch,
            pqxx::binarystring(item.payload), delivered_at, group);
        if (d > absl::ZeroDuration()) {
          std::this_thread::sleep_for(absl::ToChronoMicroseconds(d));
        }
        return absl::OkStatus();
      };
    case HandlerSpec::Kind::kSleep:
      return
          [d = spec.sleep, given = spec.given](const Item&, AckTransaction&) {
            // In slices, so that a cut-off (InFlightCalls) ends it.
            const absl::Time end = absl::Now() + d;
            for (absl::Time now = absl::Now(); now < end; now = absl::Now()) {
              if (CutOffNow()) return CutOffError(given);
              absl::SleepFor(std::min(end - now, absl::Milliseconds(20)));
            }
            return absl::OkStatus();
          };
    case HandlerSpec::Kind::kSql:
    case HandlerSpec::Kind::kExec:
    case HandlerSpec::Kind::kHttp:
      return nullptr;  // BuildHandlers makes these
    case HandlerSpec::Kind::kFail:
      return [rate = spec.fail_rate](const Item& item, AckTransaction&) {
        static thread_local absl::BitGen gen;
        if (absl::Bernoulli(gen, rate)) {
          return absl::InternalError(absl::StrCat(
              "injected failure (fail:", rate, ") on attempt ", item.attempt));
        }
        return absl::OkStatus();
      };
  }
  return nullptr;
}

absl::Status CheckFailRate(double rate) {
  if (rate >= 0 && rate <= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--fail_rate=", rate,
      " is not a probability: give a number from 0 to 1, e.g. 0.05 for one "
      "delivery in twenty"));
}

Handler WithInjectedFailures(Handler handler, double rate) {
  if (rate <= 0) return handler;
  return [handler = std::move(handler), rate](const Item& item,
                                              AckTransaction& ack) {
    RETURN_IF_ERROR(InjectedFailure(rate, item));
    return handler(item, ack);
  };
}

}  // namespace sqlgroup::cli
