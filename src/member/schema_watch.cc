#include "member/schema_watch.h"

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

namespace sqlgroup {

SchemaWatch::SchemaWatch(Config config, store::MembershipStore& store,
                         std::shared_ptr<spdlog::logger> logger)
    : config_(std::move(config)),
      store_(store),
      log_(std::move(logger)),
      schema_(config_.at_start) {
  if (config_.published) config_.published->store(schema_.version);
}

absl::Status SchemaWatch::Check(const std::string& session) {
  next_ = absl::Now() + config_.interval;
  const absl::StatusOr<internal::SchemaState> state = store_.ReadSchema();
  if (!state.ok()) {
    // Read it again once the connection is back.
    if (absl::IsUnavailable(state.status())) changed_ = true;
    return state.status();
  }
  const internal::BinarySchemas binary = internal::ThisBinary();
  const absl::StatusOr<internal::Skew> skew =
      internal::CheckSkew(*state, binary);
  if (!skew.ok()) {
    // It may no longer know what an item means (a pause, a new order):
    // no further item is handed to its handler.
    return absl::FailedPreconditionError(
        absl::StrCat(skew.status().message(),
                     ". This member takes no more items and stops"));
  }
  if (state->version != schema_.version) {
    const std::string note = internal::SkewNote(*skew, *state, binary);
    log_->info("group={} {}", config_.group,
               note.empty() ? absl::StrCat("the database's sqlgroup schema is "
                                           "now version ",
                                           state->version)
                            : note);
  }
  schema_ = *state;
  if (config_.published) config_.published->store(schema_.version);
  if (session.empty() || recorded_ || !RecordsVersion()) {
    return absl::OkStatus();
  }
  const absl::Status recorded = store_.RecordVersion(session);
  if (absl::IsPermissionDenied(recorded)) {
    // Bookkeeping: not worth stopping a member that consumes. Tried again
    // at each check (a grant may come), said once.
    if (refusal_said_) return absl::OkStatus();
    refusal_said_ = true;
    log_->warn(
        "group={} session={} its version is not recorded ({}): run "
        "`sqlgroup grant` again with this release",
        config_.group, session, std::string(recorded.message()));
    return absl::OkStatus();
  }
  if (!recorded.ok()) {
    if (absl::IsUnavailable(recorded)) changed_ = true;
    return recorded;
  }
  recorded_ = true;
  return absl::OkStatus();
}

}  // namespace sqlgroup
