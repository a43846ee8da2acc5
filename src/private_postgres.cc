#include "sqlgroup/private_postgres.h"

#include <fcntl.h>
#include <grp.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "pqxx/pqxx"

namespace sqlgroup {
namespace {

namespace fs = std::filesystem;

constexpr char kDirPrefix[] = "sqlgroup-pg-";
// In a kept directory: it was made here, so a later Start may reuse it (a
// cluster it did not make is never adopted).
constexpr char kKeptMarker[] = "sqlgroup-postgres";
constexpr absl::Duration kStopGrace = absl::Seconds(10);
constexpr absl::Duration kPollInterval = absl::Milliseconds(50);
constexpr int kPortAttempts = 5;
constexpr int kLogTailLines = 20;

std::string EnvOr(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

absl::Status ErrnoError(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

std::string ReadFile(const std::string& path, std::streamoff offset = 0) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(offset);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string Tail(const std::string& path) {
  std::string text = ReadFile(path);  // outlives the views into it
  std::vector<absl::string_view> lines =
      absl::StrSplit(absl::StripTrailingAsciiWhitespace(text), '\n');
  if (lines.size() > kLogTailLines) {
    lines.erase(lines.begin(), lines.end() - kLogTailLines);
  }
  return absl::StrCat("last lines of ", path, ":\n",
                      absl::StrJoin(lines, "\n"));
}

// First line of a pid file (owner.pid, postmaster.pid).
std::optional<pid_t> ReadPid(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  pid_t pid = 0;
  if (!std::getline(in, line) || !absl::SimpleAtoi(line, &pid) || pid <= 0) {
    return std::nullopt;
  }
  return pid;
}

// kill(pid, 0) also succeeds for zombies, which linger when the reaper (our
// init, or this process for its own children) has not collected them yet.
bool ProcessAlive(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return true;
  char state = stat[paren + 2];
  return state != 'Z' && state != 'X';
}

// Guards against a pid reused by an unrelated process: a postmaster's
// working directory is its data directory.
bool IsPostmasterOf(pid_t pid, const fs::path& data_dir) {
  std::error_code cwd_error, data_error;
  fs::path cwd =
      fs::read_symlink(absl::StrCat("/proc/", pid, "/cwd"), cwd_error);
  fs::path data = fs::canonical(data_dir, data_error);
  return !cwd_error && !data_error && cwd == data;
}

bool WaitUntilGone(pid_t pid, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (ProcessAlive(pid)) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(kPollInterval);
  }
  return true;
}

// Removes clusters whose owner died without Stop(): their postmaster should
// have exited on the parent-death signal, but make sure.
void RemoveStaleDirs(const fs::path& base) {
  std::vector<fs::path> stale;
  std::error_code ec;
  for (fs::directory_iterator it(base, ec), end; !ec && it != end;
       it.increment(ec)) {
    const fs::path& dir = it->path();
    if (!absl::StartsWith(dir.filename().string(), kDirPrefix)) continue;
    if (!fs::is_directory(fs::symlink_status(dir, ec))) continue;
    std::optional<pid_t> owner = ReadPid(dir / "owner.pid");
    if (owner.has_value() && !ProcessAlive(*owner)) stale.push_back(dir);
  }
  for (const fs::path& dir : stale) {
    fs::path data = dir / "data";
    std::optional<pid_t> pm = ReadPid(data / "postmaster.pid");
    if (pm.has_value() && ProcessAlive(*pm)) {
      if (!IsPostmasterOf(*pm, data)) continue;  // not provably ours to kill
      kill(*pm, SIGQUIT);
      if (!WaitUntilGone(*pm, kStopGrace)) kill(*pm, SIGKILL);
    }
    fs::remove_all(dir, ec);
  }
}

absl::StatusOr<int> PickPort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int rc = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  if (rc == 0) {
    rc = getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  }
  absl::Status status = rc == 0 ? absl::OkStatus() : ErrnoError("bind");
  close(fd);
  if (!status.ok()) return status;
  return ntohs(addr.sin_port);
}

void WriteStderr(const char* msg, const char* arg) {
  for (const char* s : {msg, arg, "\n"}) {
    (void)!write(STDERR_FILENO, s, std::strlen(s));
  }
}

// The forked child, until exec: async-signal-safe calls only, since other
// threads of the parent may have held locks (malloc's) at fork time.
[[noreturn]] void ExecChild(char* const argv[], const char* cwd, int log_fd,
                            uid_t uid, gid_t gid, pid_t parent_pid,
                            bool tie_to_parent) {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  int null_fd = open("/dev/null", O_RDONLY);
  if (null_fd < 0 || dup2(null_fd, STDIN_FILENO) < 0 ||
      dup2(log_fd, STDOUT_FILENO) < 0 || dup2(log_fd, STDERR_FILENO) < 0) {
    _exit(127);
  }
  // Keep the parent's sockets and pipes out of the server.
  if (close_range(3, ~0U, 0) != 0) {
    for (int fd = 3; fd < 1024; ++fd) close(fd);
  }
  if (chdir(cwd) != 0) WriteStderr("sqlgroup: cannot chdir to ", cwd);
  if (uid != 0 &&
      (setgroups(1, &gid) != 0 || setgid(gid) != 0 || setuid(uid) != 0)) {
    WriteStderr("sqlgroup: cannot switch user for ", argv[0]);
    _exit(127);
  }
  if (tie_to_parent) {
    // Out of our process group, so Ctrl-C or Ctrl-Z at a terminal reaches
    // only us; the server stops when we say so or when we die.
    setpgid(0, 0);
    // After setuid, which clears the parent-death signal. If the parent
    // already died, the signal will never come: give up.
    prctl(PR_SET_PDEATHSIG, SIGQUIT);
    if (getppid() != parent_pid) _exit(1);
  }
  execv(argv[0], argv);
  WriteStderr("sqlgroup: cannot execute ", argv[0]);
  _exit(127);
}

// Starts `args` as a child with output appended to `log_path`.
absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& args,
                            const std::string& cwd, const std::string& log_path,
                            uid_t uid, gid_t gid, bool tie_to_parent) {
  int log_fd =
      open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return ErrnoError(absl::StrCat("open ", log_path));
  std::vector<char*> argv;
  for (const std::string& arg : args) {
    argv.push_back(const_cast<char*>(arg.c_str()));
  }
  argv.push_back(nullptr);
  pid_t parent_pid = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    ExecChild(argv.data(), cwd.c_str(), log_fd, uid, gid, parent_pid,
              tie_to_parent);
  }
  absl::Status status = pid < 0 ? ErrnoError("fork") : absl::OkStatus();
  close(log_fd);
  if (!status.ok()) return status;
  return pid;
}

// Reaps child `pid`, waiting up to `timeout`. False if it is still running.
bool Reap(pid_t pid, absl::Duration timeout, int* wait_status) {
  absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    pid_t r = waitpid(pid, wait_status, WNOHANG);
    // ECHILD: reaped elsewhere (or SIGCHLD ignored); either way it is gone.
    if (r == pid || (r < 0 && errno != EINTR)) return true;
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

std::string DescribeExit(int status) {
  return WIFSIGNALED(status) ? absl::StrCat("signal ", WTERMSIG(status))
                             : absl::StrCat("exit code ", WEXITSTATUS(status));
}

// The postmaster records itself in postmaster.pid and flips its status line
// to "ready" once it accepts connections. Checking it means a ping answered
// by some other server that grabbed our port does not count.
bool PostmasterReady(const std::string& data_dir, pid_t pid) {
  std::vector<std::string> lines =
      absl::StrSplit(ReadFile(absl::StrCat(data_dir, "/postmaster.pid")), '\n');
  pid_t file_pid = 0;
  return lines.size() >= 8 && absl::SimpleAtoi(lines[0], &file_pid) &&
         file_pid == pid && absl::StartsWith(lines[7], "ready");
}

bool ValidIdentifier(absl::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  if (absl::ascii_isdigit(name[0])) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '_') return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PrivatePostgres>> PrivatePostgres::Start(
    PrivatePostgresOptions options) {
  if (options.bin_dir.empty()) {
    options.bin_dir = EnvOr("SQLGROUP_PG_BIN", "/usr/lib/postgresql/15/bin");
  }
  if (options.base_dir.empty()) options.base_dir = EnvOr("TMPDIR", "/tmp");
  for (const char* binary : {"initdb", "postgres"}) {
    std::string path = absl::StrCat(options.bin_dir, "/", binary);
    if (access(path.c_str(), X_OK) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          path, " is missing or not executable: install the Debian package ",
          "postgresql-15, or point SQLGROUP_PG_BIN at the bin directory of ",
          "a PostgreSQL 14 to 18 (scripts/fetch_postgres.sh MAJOR prints ",
          "one)"));
    }
  }

  std::unique_ptr<PrivatePostgres> pg(new PrivatePostgres());
  if (geteuid() == 0) {  // the server refuses to run as root
    const passwd* user = getpwnam(options.os_user.c_str());
    if (user == nullptr || user->pw_uid == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "running as root, but OS user \"", options.os_user,
          "\" to run PostgreSQL as is missing or is root: install the ",
          "Debian package postgresql-15 (it creates the user) or create it"));
    }
    pg->uid_ = user->pw_uid;
    pg->gid_ = user->pw_gid;
  }

  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the port must be 1 to 65535 (0: a free one), got ", options.port));
  }
  std::error_code ec;
  fs::path base = fs::absolute(options.base_dir, ec);
  RemoveStaleDirs(base);
  std::string root;
  if (!options.dir.empty()) {
    root = fs::absolute(options.dir, ec).lexically_normal().string();
    if (!root.empty() && root.back() == '/') root.pop_back();
    fs::create_directories(root, ec);
    if (ec || !fs::is_directory(root)) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot make the directory ", root, ": ",
                       ec ? ec.message() : "something else has that name"));
    }
    pg->reused_ = fs::exists(fs::path(root) / kKeptMarker, ec) &&
                  fs::exists(root + "/data/PG_VERSION", ec);
    if (!pg->reused_ && !fs::is_empty(root, ec)) {
      return absl::FailedPreconditionError(absl::StrCat(
          root,
          " is not empty and holds no cluster an earlier `sqlgroup postgres` "
          "made there: give a new or empty directory, so nothing of yours is "
          "overwritten or adopted"));
    }
    // Kept; when this run made it and the server never started, what it
    // made goes again (Stop).
    pg->keep_ = true;
  } else {
    root = (base / absl::StrCat(kDirPrefix, "XXXXXX")).string();
    if (mkdtemp(root.data()) == nullptr) {
      return ErrnoError(absl::StrCat("mkdtemp ", root));
    }
  }
  // From here on, failing returns destroy `pg`, which removes the directory
  // (unless it is kept).
  pg->options_ = std::move(options);
  pg->owner_pid_ = getpid();
  pg->root_dir_ = root;
  pg->data_dir_ = root + "/data";
  pg->socket_dir_ = root + "/socket";
  pg->keep_ = pg->keep_ || pg->options_.keep;
  // A kept directory has no owner: a later Start under the same base must
  // not take it for a stale one when this process dies without Stop().
  const std::string stamp =
      root + (pg->keep_ ? absl::StrCat("/", kKeptMarker) : "/owner.pid");
  if (!(std::ofstream(stamp) << getpid() << "\n")) {
    return absl::InternalError("cannot write " + stamp);
  }
  // Clients of any user must reach the socket inside.
  if (chmod(root.c_str(), 0711) != 0) return ErrnoError("chmod " + root);
  if ((!pg->reused_ && mkdir(pg->data_dir_.c_str(), 0700) != 0) ||
      (mkdir(pg->socket_dir_.c_str(), 0755) != 0 && errno != EEXIST)) {
    return ErrnoError("mkdir in " + root);
  }
  for (const std::string& dir : {root, pg->data_dir_, pg->socket_dir_}) {
    if (pg->uid_ != 0 && chown(dir.c_str(), pg->uid_, pg->gid_) != 0) {
      return ErrnoError("chown " + dir);
    }
  }
  if (pg->reused_) return LaunchOnAPort(std::move(pg));

  std::string initdb_log = root + "/initdb.log";
  absl::StatusOr<pid_t> initdb =
      Spawn({pg->options_.bin_dir + "/initdb", "-D", pg->data_dir_, "-U",
             "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "-N"},
            root, initdb_log, pg->uid_, pg->gid_, /*tie_to_parent=*/false);
  if (!initdb.ok()) return initdb.status();
  int wait_status = 0;
  Reap(*initdb, absl::InfiniteDuration(), &wait_status);
  if (!WIFEXITED(wait_status) || WEXITSTATUS(wait_status) != 0) {
    std::string hint = pg->uid_ == 0
                           ? ""
                           : absl::StrCat(" (is ", root, " reachable by user ",
                                          pg->options_.os_user, "?)");
    return absl::InternalError(absl::StrCat("initdb failed (",
                                            DescribeExit(wait_status), ")",
                                            hint, "; ", Tail(initdb_log)));
  }

  if (!pg->options_.hba_rules.empty()) {  // first thing in a new cluster
    const std::string hba = pg->data_dir_ + "/pg_hba.conf";
    const std::string rules =
        absl::StrCat(absl::StrJoin(pg->options_.hba_rules, "\n"), "\n");
    std::string text = rules + ReadFile(hba);
    if (!(std::ofstream(hba, std::ios::trunc) << text)) {
      return absl::InternalError("cannot write " + hba);
    }
  }

  return LaunchOnAPort(std::move(pg));
}

absl::StatusOr<std::unique_ptr<PrivatePostgres>> PrivatePostgres::LaunchOnAPort(
    std::unique_ptr<PrivatePostgres> pg) {
  if (pg->options_.port > 0) {
    pg->port_ = pg->options_.port;
    bool port_in_use = false;
    absl::Status status = pg->Launch(&port_in_use);
    if (port_in_use) {
      return absl::UnavailableError(absl::StrCat(
          "port ", pg->port_,
          " on 127.0.0.1 is in use: pick another, or 0 for a free one"));
    }
    if (!status.ok()) return status;
    pg->launched_ = true;
    return pg;
  }
  // The port is free when picked but may be taken before the server binds.
  absl::Status status;
  for (int attempt = 0; attempt < kPortAttempts; ++attempt) {
    absl::StatusOr<int> port = PickPort();
    if (!port.ok()) return port.status();
    pg->port_ = *port;
    bool port_in_use = false;
    status = pg->Launch(&port_in_use);
    if (status.ok()) {
      pg->launched_ = true;
      return pg;
    }
    if (!port_in_use) break;
  }
  return status;
}

absl::Status PrivatePostgres::Launch(bool* port_in_use) {
  *port_in_use = false;
  // Not pg_ctl: it daemonizes the server, which would lose the parent-death
  // link. Later -c settings win, so options_.settings come last.
  std::vector<std::string> args = {options_.bin_dir + "/postgres", "-D",
                                   data_dir_};
  args.insert(args.end(), {"-p", absl::StrCat(port_), "-k", socket_dir_});
  auto set = [&args](std::string setting) {
    args.insert(args.end(), {"-c", std::move(setting)});
  };
  set("listen_addresses=127.0.0.1");
  if (!options_.durable) {
    for (const char* off :
         {"fsync", "synchronous_commit", "full_page_writes"}) {
      set(absl::StrCat(off, "=off"));
    }
  }
  set("max_connections=300");
  set("unix_socket_permissions=0777");
  for (const auto& [name, value] : options_.settings) {
    set(absl::StrCat(name, "=", value));
  }

  std::string log = root_dir_ + "/server.log";
  std::error_code ec;
  std::uintmax_t log_start = fs::file_size(log, ec);  // restarts append
  if (ec) log_start = 0;
  absl::StatusOr<pid_t> pid =
      Spawn(args, data_dir_, log, uid_, gid_, /*tie_to_parent=*/true);
  if (!pid.ok()) return pid.status();
  pid_ = *pid;

  std::string conninfo = Dsn() + " connect_timeout=2";
  absl::Time deadline = absl::Now() + options_.start_timeout;
  for (;;) {
    int wait_status = 0;
    if (Reap(pid_, absl::ZeroDuration(), &wait_status)) {
      pid_ = -1;
      *port_in_use = absl::StrContains(
          ReadFile(log, static_cast<std::streamoff>(log_start)),
          "Address already in use");
      return absl::UnavailableError(
          absl::StrCat("postgres exited during startup (",
                       DescribeExit(wait_status), "); ", Tail(log)));
    }
    if (PostmasterReady(data_dir_, pid_) &&
        PQping(conninfo.c_str()) == PQPING_OK) {
      return absl::OkStatus();
    }
    if (absl::Now() >= deadline) {
      StopServer(SIGQUIT);
      return absl::UnavailableError(absl::StrCat(
          "postgres did not accept connections on port ", port_, " within ",
          absl::FormatDuration(options_.start_timeout), "; ", Tail(log)));
    }
    absl::SleepFor(kPollInterval);
  }
}

void PrivatePostgres::StopServer(int sig) {
  if (pid_ <= 0) return;
  kill(pid_, sig);
  int wait_status = 0;
  if (!Reap(pid_, kStopGrace, &wait_status)) {
    std::fprintf(stderr,
                 "sqlgroup: postgres (pid %d) ignored signal %d for %s;"
                 " killing it\n",
                 pid_.load(), sig, absl::FormatDuration(kStopGrace).c_str());
    kill(pid_, SIGKILL);
    Reap(pid_, absl::InfiniteDuration(), &wait_status);
  }
  pid_ = -1;
}

PrivatePostgres::~PrivatePostgres() {
  absl::Status status = Stop();
  if (!status.ok()) {
    std::fprintf(stderr, "sqlgroup: stopping private PostgreSQL: %s\n",
                 status.ToString().c_str());
  }
}

absl::Status PrivatePostgres::Stop() {
  if (getpid() != owner_pid_) {  // a forked copy: the cluster is not ours
    pid_ = -1;
    root_dir_.clear();
    return absl::OkStatus();
  }
  StopServer(SIGINT);  // fast shutdown
  if (root_dir_.empty()) return absl::OkStatus();
  std::string root = std::exchange(root_dir_, "");
  std::error_code ec;
  if (keep_ && (launched_ || reused_)) return absl::OkStatus();
  if (keep_ && !options_.dir.empty()) {
    // The server never ran from what this run made in a directory given:
    // it goes, and the directory stays, empty, for the next try.
    for (const auto& entry : fs::directory_iterator(root, ec)) {
      fs::remove_all(entry.path(), ec);
    }
    return ec ? absl::InternalError(
                    absl::StrCat("emptying ", root, ": ", ec.message()))
              : absl::OkStatus();
  }
  fs::remove_all(root, ec);
  return ec ? absl::InternalError(
                  absl::StrCat("removing ", root, ": ", ec.message()))
            : absl::OkStatus();
}

absl::Status PrivatePostgres::Restart(bool immediate) {
  if (root_dir_.empty()) {
    return absl::FailedPreconditionError("private PostgreSQL was stopped");
  }
  // SIGQUIT is `pg_ctl -m immediate`: no shutdown checkpoint.
  StopServer(immediate ? SIGQUIT : SIGINT);
  bool port_in_use = false;
  return Launch(&port_in_use);
}

std::string PrivatePostgres::Dsn(const std::string& dbname) const {
  return absl::StrCat("host=127.0.0.1 port=", port_,
                      " user=postgres dbname=", dbname);
}

absl::Status PrivatePostgres::CreateDatabase(const std::string& name) {
  if (!ValidIdentifier(name)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "invalid database name \"%s\": want [A-Za-z_][A-Za-z0-9_]{0,62}",
        absl::CHexEscape(name)));
  }
  auto failure = [&](const std::exception& e) {
    return absl::StrCat("CREATE DATABASE ", name, " on ", Dsn(), ": ",
                        absl::StripTrailingAsciiWhitespace(e.what()));
  };
  try {
    pqxx::connection conn(Dsn());
    pqxx::nontransaction tx(conn);
    // Quoted, so the name is case-sensitive exactly as Dsn(name) uses it.
    tx.exec0("CREATE DATABASE " + tx.quote_name(name));
    return absl::OkStatus();
  } catch (const pqxx::broken_connection& e) {
    return absl::UnavailableError(failure(e));
  } catch (const pqxx::unique_violation& e) {  // a concurrent CREATE
    return absl::AlreadyExistsError(failure(e));
  } catch (const pqxx::sql_error& e) {
    if (e.sqlstate() == "42P04") return absl::AlreadyExistsError(failure(e));
    return absl::InternalError(failure(e));
  } catch (const std::exception& e) {
    return absl::InternalError(failure(e));
  }
}

}  // namespace sqlgroup
