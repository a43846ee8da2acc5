#include "store/connection.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <pqxx/pqxx>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "dsn.h"
#include "store/errors.h"
#include "store/statements.h"
#include "wakeup.h"

namespace sqlgroup::store {
namespace {

std::string Millis(absl::Duration d) {
  return absl::StrCat(absl::ToInt64Milliseconds(d));
}

// The SET statements of `options`' server-side limits and commit mode;
// a zero limit is the server's default, as is a synchronous commit.
// `local`: SET LOCAL, for one transaction. `only_set`: only what differs
// from the server's defaults (for a new session).
std::string LimitSettings(const ConnectOptions& options, bool local,
                          bool only_set) {
  auto set = [&](const char* name, absl::Duration d) {
    if (only_set && d <= absl::ZeroDuration()) return std::string();
    return absl::StrCat(local ? "SET LOCAL " : "SET ", name, " = ",
                        d > absl::ZeroDuration() ? Millis(d) : "DEFAULT", ";");
  };
  std::string commit;
  if (options.asynchronous_commit || !only_set) {
    commit =
        absl::StrCat(local ? "SET LOCAL " : "SET ", "synchronous_commit = ",
                     options.asynchronous_commit ? "off" : "DEFAULT", ";");
  }
  return absl::StrCat(set("statement_timeout", options.statement_timeout),
                      set("lock_timeout", options.lock_timeout),
                      set("idle_in_transaction_session_timeout",
                          options.idle_in_transaction_timeout),
                      commit);
}

// What libpq's reason for a failed connection says of the server's
// readiness: libpq gives the text of the server's refusal, not its
// SQLSTATE. kFull: no slot left (53300, a role's or database's limit, or a
// saturated PgBouncer's 08P01 "no more connections allowed"); kNotReady:
// starting, stopping or recovering (57P03).
enum class Busy { kNo, kFull, kNotReady };

Busy BusyReason(const std::string& reason) {
  for (const char* full :
       {"too many clients already", "remaining connection slots are reserved",
        "too many connections for", "no more connections allowed"}) {
    if (absl::StrContains(reason, full)) return Busy::kFull;
  }
  for (const char* not_ready :
       {"the database system is starting up",
        "the database system is shutting down",
        "the database system is in recovery mode",
        "the database system is not yet accepting connections",
        "the database system is not accepting connections"}) {
    if (absl::StrContains(reason, not_ready)) return Busy::kNotReady;
  }
  return Busy::kNo;
}

// libpq refused the server's TLS certificate, TLS itself, or the client's
// certificate files, for a reason that a retry does not change (a wrong
// CA, a host name the certificate does not name, a missing root
// certificate file, a server without TLS under sslmode=require or
// stricter, an unreadable sslcert or sslkey). Not a connection cut during
// the handshake ("SSL SYSCALL error"), which may be.
bool TlsRefusal(const std::string& reason) {
  for (const char* tls :
       {"certificate verify failed", "does not match host name",
        "root certificate file", "could not read root certificate",
        "server does not support SSL", "certificate has expired",
        "could not load private key",
        "certificate present, but not private "
        "key"}) {
    if (absl::StrContains(reason, tls)) return true;
  }
  return false;
}

// Names the target and libpq's reason without any password. A malformed
// string holding a password is not shown at all: libpq's message about it
// may quote the password, and the mask may miss part of it.
std::string ConnectFailure(const std::string& dsn, std::string reason,
                           int timeout_s) {
  while (!reason.empty() && (reason.back() == '\n' || reason.back() == ' ')) {
    reason.pop_back();
  }
  if (!MaskIsExact(dsn)) {
    return "cannot connect: the connection string holds a password but is "
           "malformed, so neither it nor libpq's message about it is shown. "
           "In keyword/value form quote values with spaces ('...') and "
           "escape ' and \\ with \\; in a URI percent-encode @ : / ? # % in "
           "the user name and password (or pass the password in PGPASSWORD "
           "or ~/.pgpass)";
  }
  const std::string target =
      dsn.empty() ? "the database named by libpq's PG* variables (no "
                    "--dsn or SQLGROUP_DSN given)"
                  : absl::StrCat("'", MaskDsn(dsn), "'");
  const std::string said = absl::StrCat("cannot connect to ", target, ": ",
                                        RedactPasswords(reason, dsn));
  switch (BusyReason(reason)) {
    case Busy::kFull:
      return absl::StrCat(
          said,
          ". The server has no connection slot left for now (its "
          "max_connections, a role's or database's connection limit, or a "
          "full pooler); members and producers wait for one and try again. "
          "To need fewer, give the fleet smaller connection budgets "
          "(max_connections) or put a pooler in front (docs/POOLERS.md)");
    case Busy::kNotReady:
      return absl::StrCat(said,
                          ". The server is starting, stopping or recovering; "
                          "members and producers wait until it takes "
                          "connections again");
    case Busy::kNo:
      break;
  }
  if (TlsRefusal(reason)) {
    return absl::StrCat(
        absl::StripSuffix(absl::StripTrailingAsciiWhitespace(said), "."),
        ". The TLS connection was not accepted, and trying again will not "
        "change that: check that sslrootcert names the CA that signed the "
        "server's certificate, that the host in the connection string is "
        "one the certificate names (sslmode=verify-full checks it), that "
        "the server has ssl = on, and, with a client certificate, that "
        "sslcert and sslkey name readable files that belong together");
  }
  const std::string hint =
      absl::StrContains(reason, "password authentication failed") ||
              absl::StrContains(reason, "no password supplied")
          ? "check the user name and password"
          : "check --dsn / SQLGROUP_DSN and that the server is up";
  return absl::StrCat(said, " (tried for at most ", timeout_s, " s; ", hint,
                      ")");
}

// The SET LOCAL statements of a pooled connection's limits.
std::string LocalSettings(const ConnectOptions& options) {
  return LimitSettings(options, /*local=*/true, /*only_set=*/true);
}

}  // namespace

void LocalLimits(pqxx::transaction_base& tx) {
  if (PooledState* pooled = PooledStateOf(tx.conn())) {
    // In the same round trip: which of our statements the server
    // connection this transaction got has prepared (ExecPrepared).
    const bool list = !pooled->statements.empty();
    const std::string query =
        absl::StrCat(pooled->local_limits, list ? kListPrepared : "");
    if (query.empty()) return;
    const pqxx::result r = tx.exec(query);
    if (list) NoteListed(*pooled, &tx, r);
  }
}

ConnectionTimeouts::ConnectionTimeouts(const ConnectOptions& options)
    : statement_(options.statement_timeout),
      lock_(options.lock_timeout),
      idle_in_transaction_(options.idle_in_transaction_timeout),
      asynchronous_commit_(options.asynchronous_commit) {}

absl::StatusOr<bool> ConnectionTimeouts::Follow(pqxx::connection& conn,
                                                const ConnectOptions& options) {
  const ConnectionTimeouts wanted(options);
  if (wanted.statement_ == statement_ && wanted.lock_ == lock_ &&
      wanted.idle_in_transaction_ == idle_in_transaction_ &&
      wanted.asynchronous_commit_ == asynchronous_commit_) {
    return false;
  }
  if (PooledState* pooled = PooledStateOf(conn)) {
    pooled->local_limits = LocalSettings(options);
    *this = wanted;
    return true;
  }
  absl::Status s = Guard("set the connection's timeouts", [&] {
    pqxx::nontransaction tx(conn);
    tx.exec(LimitSettings(options, /*local=*/false, /*only_set=*/false));
  });
  if (!s.ok()) return s;
  *this = wanted;
  return true;
}

absl::StatusOr<std::unique_ptr<pqxx::connection>> Connect(
    const std::string& dsn, const ConnectOptions& options) {
  const int timeout_s =
      std::max<int64_t>(1, absl::ToInt64Seconds(absl::Ceil(
                               options.connect_timeout, absl::Seconds(1))));
  // Detecting opens as for a pooler: no session state until it is known
  // that the session is the connection's own.
  const bool open_pooled = options.transaction_pooler || options.detect_pooler;
  std::unique_ptr<pqxx::connection> conn;
  try {
    const std::string target = WithConnectTimeout(dsn, timeout_s);
    // Through a pooler one name for every kind of connection: PgBouncer
    // sets a server connection's application_name again whenever it
    // passes to a client with another, a statement per transaction.
    conn = std::make_unique<pqxx::connection>(
        open_pooled ? WithParameter(target, "application_name", "sqlgroup")
                    : target);
  } catch (const std::exception& e) {
    absl::Status s =
        absl::UnavailableError(ConnectFailure(dsn, e.what(), timeout_s));
    // Refused for a reason that waiting does not change: callers that
    // retry connections (a producer riding out a restart) stop at once.
    const std::string reason = e.what();
    if (BusyReason(reason) != Busy::kNo) {
      s.SetPayload(kServerBusy, absl::Cord("1"));
    }
    for (const char* lasting :
         {"password authentication failed", "no password supplied",
          "does not exist", "pg_hba.conf rejects",
          "permission denied for database"}) {
      if (absl::StrContains(reason, lasting)) {
        s.SetPayload(kRefusedForGood, absl::Cord("1"));
        break;
      }
    }
    if (TlsRefusal(reason)) s.SetPayload(kRefusedForGood, absl::Cord("1"));
    return s;
  }
  // Reconnecting is the caller's decision (with backoff, re-preparing
  // statements); libpqxx 6 would otherwise silently revive a broken one.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  conn->inhibit_reactivation(true);
#pragma GCC diagnostic pop
  bool pooled = options.transaction_pooler;
  if (!pooled && options.detect_pooler) {
    // A pooler answers the connect itself and makes up the process id it
    // gives (PgBouncer, pgcat, Supavisor, RDS Proxy); the server's own
    // differs. One round trip, once per connection opened this way.
    absl::Status s = Guard("find out whether a pooler answers", [&] {
      pqxx::nontransaction tx(*conn);
      pooled = tx.exec1("SELECT pg_backend_pid()")[0].as<int>() !=
               conn->backendpid();
    });
    if (!s.ok()) return s;
  }
  if (pooled) {
    MarkPooled(*conn).local_limits = LocalSettings(options);
    return conn;  // no session state
  }
  Unmark(*conn);
  // Limits that are zero are left alone: a new session has the server's.
  const std::string setup = absl::StrCat(
      "SET application_name = ", conn->quote(options.application_name), ";",
      LimitSettings(options, /*local=*/false, /*only_set=*/true));
  absl::Status s = Guard("configure connection", [&] {
    pqxx::nontransaction tx(*conn);
    tx.exec(setup);
  });
  if (!s.ok()) return s;
  return conn;
}

bool TransactionPooled(pqxx::connection& conn) {
  return PooledStateOf(conn) != nullptr;
}

bool TransactionPooled(DbConnection& db) {
  return TransactionPooled(PqxxOf(db));
}

absl::Status AwaitNotifications(pqxx::connection& conn, int wake_fd,
                                absl::Duration timeout, int other_fd) {
  return Guard("wait for notifications", [&] {
    // Some may have arrived with the results of an earlier statement.
    if (conn.get_notifs() > 0) return;
    const int sock = conn.sock();
    if (sock < 0) throw pqxx::broken_connection("connection is closed");
    pollfd fds[3] = {
        {sock, POLLIN, 0}, {wake_fd, POLLIN, 0}, {other_fd, POLLIN, 0}};
    const int ready = poll(fds, other_fd >= 0 ? 3 : 2, PollTimeoutMs(timeout));
    if (ready < 0 && errno != EINTR) {
      throw pqxx::broken_connection(std::string("poll: ") +
                                    std::strerror(errno));
    }
    // Reads whatever arrived; a closed socket shows as a broken connection.
    if (fds[0].revents != 0) conn.get_notifs();
  });
}

}  // namespace sqlgroup::store
