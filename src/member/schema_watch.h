// Keeps a member within the schema versions its binary serves: reads the
// database's schema at each join, after a `schema:N` notice or a reconnect
// (Changed), and every `interval` (a member without LISTEN hears no
// notice); says when the member must stop; and records the member's
// version in its session once the schema can hold it.
//
// Thread safety: the control thread, except Changed() and changed(),
// which a worker dispatching the control connection's NOTIFYs may call.
#ifndef SQLGROUP_MEMBER_SCHEMA_WATCH_H_
#define SQLGROUP_MEMBER_SCHEMA_WATCH_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "schema_skew.h"
#include "store/membership_store.h"

namespace spdlog {
class logger;
}

namespace sqlgroup {

class SchemaWatch {
 public:
  struct Config {
    std::string group;
    // The schema as the consumer found it when it was created.
    internal::SchemaState at_start;
    // How often the schema is read without a notice.
    absl::Duration interval = absl::Seconds(5);
    // Where the version (at_start, then each one read that this binary may
    // run against) is published for the member's workers, whose
    // statements depend on it. Optional.
    std::shared_ptr<std::atomic<int>> published;
  };
  SchemaWatch(Config config, store::MembershipStore& store,
              std::shared_ptr<spdlog::logger> logger);

  // The schema may have changed (a notice, or a notice missed while the
  // connection was down): read it at the next Due().
  void Changed() { changed_ = true; }
  bool changed() const { return changed_; }
  // Whether to Check() now; clears the notice.
  bool Due(absl::Time now) { return changed_.exchange(false) || now >= next_; }
  absl::Time next_check() const { return next_; }

  // Reads the schema and, once it holds versions, records this member's in
  // `session` (when not empty and not recorded yet). OK: the member goes
  // on. FAILED_PRECONDITION: this binary may not run against the schema;
  // the member must stop (the message says why). Another error is the
  // read's (UNAVAILABLE: read again once the connection is back). A role
  // that may not record its version is only warned about.
  absl::Status Check(const std::string& session);
  // Whether a session registered now records the member's version, and
  // that one did (it then needs no RecordVersion).
  bool RecordsVersion() const {
    return schema_.version >= internal::kVersionsRecordedFrom;
  }
  void Joined(bool recorded) { recorded_ = recorded; }
  // Whether a session registered now keeps a secret (schema 19): a role
  // scoped to groups needs it to end its own live session.
  bool KeepsSecrets() const {
    return schema_.version >= internal::kGroupGrantsFrom;
  }

 private:
  const Config config_;
  store::MembershipStore& store_;
  std::shared_ptr<spdlog::logger> log_;

  std::atomic<bool> changed_{false};
  internal::SchemaState schema_;  // as last read
  absl::Time next_ = absl::InfinitePast();
  bool recorded_ = false;      // the version, in the session of the last Joined
  bool refusal_said_ = false;  // a role that may not record it was logged
};

}  // namespace sqlgroup

#endif  // SQLGROUP_MEMBER_SCHEMA_WATCH_H_
