#include "cli/handlers/exec_handler.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "cli/handlers/in_flight_calls.h"
#include "cli/handlers/item_json.h"
#include "cli/handlers/line_child.h"
#include "cli/handlers/per_thread.h"

namespace sqlgroup::cli {
namespace {

// The text after a verdict word ("retry" or "retry because"), or `fallback`.
std::string Reason(const std::string& reply, size_t word,
                   const std::string& fallback) {
  std::string rest(absl::StripAsciiWhitespace(reply.substr(word)));
  return rest.empty() ? fallback : rest;
}

bool IsVerdict(const std::string& reply, const char* word) {
  const size_t n = std::string(word).size();
  return absl::StartsWith(reply, word) &&
         (reply.size() == n || reply[n] == ' ' || reply[n] == '\t');
}

struct ExecState {
  std::vector<std::string> argv;
  absl::Duration timeout;
  std::shared_ptr<spdlog::logger> logger;
  PerThread<LineChild> children;
};

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseExecCommand(
    const std::string& command) {
  auto argv = SplitCommandLine(command);
  if (!argv.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--handler=exec:", command, ": ", argv.status().message(),
                     "; give a program and its arguments, e.g. "
                     "exec:'python3 handler.py'"));
  }
  auto path = FindProgram(argv->front());
  if (!path.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--handler=exec:", command, ": ", path.status().message(),
                     "; give the program's path or put its folder in $PATH"));
  }
  return argv;
}

absl::Status CheckExecCommandStarts(const std::vector<std::string>& argv,
                                    const std::string& given,
                                    absl::Duration wait) {
  auto child = LineChild::Start(argv);
  absl::Status s =
      child.ok() ? (*child)->StillRunningAfter(wait) : child.status();
  if (s.ok()) return s;
  return absl::InvalidArgumentError(absl::StrCat(
      "--handler=", given, ": the handler process ", s.message(),
      " before it was given any item (its own messages, if any, are above); "
      "it should run until its stdin ends, answering one line per item"));
}

absl::Status ExecVerdict(const std::string& reply) {
  if (reply == "ok") return absl::OkStatus();
  if (IsVerdict(reply, "retry")) {
    return absl::InternalError(Reason(reply, 5, "the handler asked to retry"));
  }
  if (IsVerdict(reply, "dead")) {
    return DeadLetterVerdict(Reason(reply, 4, "the handler dead-lettered it"));
  }
  return absl::InternalError(absl::StrCat(
      "the handler process replied \"", reply.substr(0, 200),
      "\", which is not a verdict: reply ok, retry REASON or dead REASON, "
      "one line per item"));
}

Handler MakeExecHandler(std::vector<std::string> argv, absl::Duration timeout,
                        std::shared_ptr<spdlog::logger> logger) {
  auto state = std::make_shared<ExecState>();
  state->argv = std::move(argv);
  state->timeout = timeout;
  state->logger = std::move(logger);
  return [state](const Item& item, AckTransaction&) -> absl::Status {
    LineChild* child = state->children.Get();
    if (child != nullptr && child->HasUnreadOutput()) {
      // A second line for the last item, or output of its own: its next
      // line could answer the wrong item. This item is not at fault.
      if (state->logger) {
        state->logger->warn(
            "exec handler: {} (pid {}) wrote a line no item asked for (one "
            "verdict line per item, and nothing else on stdout); starting "
            "it again",
            state->argv[0], child->pid());
      }
      state->children.Set(nullptr);
      child = nullptr;
    }
    if (child == nullptr || !child->alive()) {
      auto started = LineChild::Start(state->argv);
      if (!started.ok()) {
        return absl::UnavailableError(
            absl::StrCat("cannot start the handler process ", state->argv[0],
                         ": ", started.status().message()));
      }
      if (state->logger && child != nullptr) {
        state->logger->warn("exec handler: started {} again (pid {})",
                            state->argv[0], (*started)->pid());
      }
      child = started->get();
      state->children.Set(std::move(*started));
    }
    const pid_t pid = child->pid();
    const InFlightCalls::Call* call = InFlightCalls::Call::Current();
    auto reply = child->Exchange(ItemJson(item), state->timeout,
                                 call != nullptr ? &call->cut() : nullptr);
    if (absl::IsCancelled(reply.status())) {
      return CutOffError(absl::StrCat("the handler process ", state->argv[0],
                                      " (pid ", pid, ")"));
    }
    if (!reply.ok()) {
      const std::string why =
          absl::StrCat("the handler process ", state->argv[0], " (pid ", pid,
                       "): ", reply.status().message());
      if (state->logger) state->logger->warn("exec handler: {}", why);
      return absl::UnavailableError(why);
    }
    absl::Status verdict = ExecVerdict(*reply);
    if (!verdict.ok() && !IsDeadLetterVerdict(verdict) &&
        !IsVerdict(*reply, "retry")) {
      // Out of protocol: its next line may answer this item, not the next.
      state->children.Set(nullptr);
    }
    return verdict;
  };
}

}  // namespace sqlgroup::cli
