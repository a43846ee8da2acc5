// A throwaway PostgreSQL cluster owned by this process: the "embedded
// default" that `sqlgroup demo` and the test suites run against, so neither
// needs a database set up beforehand.
//
//   auto pg = sqlgroup::PrivatePostgres::Start({});
//   if (!pg.ok()) return pg.status();
//   pqxx::connection conn((*pg)->Dsn());
//
// Start() runs initdb into a fresh directory (as the `postgres` OS user when
// this process is root, since the server refuses to run as root), picks a
// port the OS reports free, listens on 127.0.0.1 and on a unix socket inside
// that directory, and returns once the server accepts connections. The
// server is stopped and its directory removed by Stop() or the destructor;
// if this process dies without either (kill -9, an uncaught signal), the
// server is told by the kernel (parent-death signal) and shuts itself down,
// and the next Start() removes directories whose owner process is gone.
//
// Thread safety: one object is not safe for concurrent Stop()/Restart();
// the accessors are safe to call from any thread. Call Start() from a thread
// that outlives the cluster (e.g. main): the parent-death signal is tied to
// the starting thread.
#ifndef SQLGROUP_PRIVATE_POSTGRES_H_
#define SQLGROUP_PRIVATE_POSTGRES_H_

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace sqlgroup {

struct PrivatePostgresOptions {
  // Where initdb, postgres and pg_ctl live. Empty: $SQLGROUP_PG_BIN if set,
  // else /usr/lib/postgresql/15/bin.
  std::string bin_dir;
  // Parent of the cluster's directory. Empty: $TMPDIR if set, else /tmp.
  std::string base_dir;
  // false trades crash safety for speed (fsync, synchronous_commit and
  // full_page_writes off): for tests only. Benchmarks and the demo keep the
  // defaults so their numbers mean something.
  bool durable = true;
  // Extra postgresql.conf settings, name -> value, applied last.
  std::vector<std::pair<std::string, std::string>> settings;
  // pg_hba.conf lines placed before initdb's, which trust every local
  // client; the first line that matches a connection wins. E.g.
  // {"host all postgres 127.0.0.1/32 trust",
  //  "host all all 127.0.0.1/32 scram-sha-256"} keeps Dsn() working and
  // makes every other role log in over TCP with its password.
  std::vector<std::string> hba_rules;
  // How long Start() waits for the server to accept connections.
  absl::Duration start_timeout = absl::Seconds(60);
  // OS user the server runs as when this process is root.
  std::string os_user = "postgres";
  // The port on 127.0.0.1; 0: one the OS reports free (tried again if it
  // is taken before the server binds it).
  int port = 0;
  // The cluster's directory instead of a fresh one under base_dir: made
  // when missing, initdb run when empty, reused (no initdb, hba_rules not
  // applied again) when an earlier Start left a cluster in it. Kept by
  // Stop(). FAILED_PRECONDITION when it holds anything else.
  std::string dir;
  // Stop() keeps the directory (data_dir() then holds the cluster).
  bool keep = false;
};

class PrivatePostgres {
 public:
  // Creates and starts a cluster. Errors: FAILED_PRECONDITION when the
  // binaries or the OS user are missing (the message says which package to
  // install), UNAVAILABLE when the server did not come up in time (the
  // message quotes the tail of the server log), INTERNAL for OS failures.
  static absl::StatusOr<std::unique_ptr<PrivatePostgres>> Start(
      PrivatePostgresOptions options);

  PrivatePostgres(const PrivatePostgres&) = delete;
  PrivatePostgres& operator=(const PrivatePostgres&) = delete;
  ~PrivatePostgres();  // Stop(), errors logged to stderr.

  // Fast shutdown (SIGINT to the postmaster, SIGKILL after 10 s), waits for
  // the process to exit, removes the directory (unless keep or dir was
  // given). Idempotent.
  absl::Status Stop();

  // Restarts the server on the same port and data. immediate=true is
  // `pg_ctl restart -m immediate`: a crash, with recovery on start; every
  // client connection breaks. For fault-injection tests.
  absl::Status Restart(bool immediate);

  // libpq keyword/value connection string to `dbname` as the superuser
  // over TCP on 127.0.0.1, e.g. "host=127.0.0.1 port=54321 user=postgres
  // dbname=postgres".
  std::string Dsn(const std::string& dbname = "postgres") const;
  // Creates database `name` (an identifier: letters, digits, _). Errors:
  // INVALID_ARGUMENT for a bad name, ALREADY_EXISTS, UNAVAILABLE.
  absl::Status CreateDatabase(const std::string& name);

  int port() const { return port_; }
  // True when Stop() leaves the directory in place.
  bool kept() const { return keep_; }
  // True when Start() found a cluster in options.dir and reused it.
  bool reused() const { return reused_; }
  const std::string& data_dir() const { return data_dir_; }
  const std::string& socket_dir() const { return socket_dir_; }
  pid_t postmaster_pid() const { return pid_; }

 private:
  PrivatePostgres() = default;

  // Launch on options_.port, or on a free port (tried again when taken).
  static absl::StatusOr<std::unique_ptr<PrivatePostgres>> LaunchOnAPort(
      std::unique_ptr<PrivatePostgres> pg);
  // Spawns the postmaster on port_ and waits until it accepts connections.
  // Sets *port_in_use when it exited because the port was taken.
  absl::Status Launch(bool* port_in_use);
  // Sends `sig` to the postmaster and reaps it (SIGKILL after 10 s).
  void StopServer(int sig);

  PrivatePostgresOptions options_;
  std::string root_dir_;  // removed on Stop() unless keep_
  bool keep_ = false;
  bool reused_ = false;
  bool launched_ = false;   // the server accepted connections once
  std::string data_dir_;    // root_dir_/data
  std::string socket_dir_;  // root_dir_/socket
  int port_ = 0;
  // The postmaster, a child of this process. Atomic: Restart() replaces it
  // while other threads may read postmaster_pid().
  std::atomic<pid_t> pid_ = -1;
  // Only the process that started the cluster stops it, so a forked copy of
  // this object (a death test, a child that exits normally) leaves it alone.
  pid_t owner_pid_ = -1;
  // The server's OS user when this process is root (uid_ stays 0 otherwise).
  uid_t uid_ = 0;
  gid_t gid_ = 0;
};

}  // namespace sqlgroup

#endif  // SQLGROUP_PRIVATE_POSTGRES_H_
