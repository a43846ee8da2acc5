// `sqlgroup produce`: sends one item (--key, --payload or --payload_file),
// items read one per line (--input FILE|-), or generated load (--generate,
// load_generator.h).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "cli/flags.h"
#include "cli/load_generator.h"
#include "cli/produce_input.h"
#include "cli/subcommands.h"
#include "dsn.h"
#include "sqlgroup/producer.h"
#include "status_macros.h"

namespace sqlgroup::cli {
namespace {

// At most this many items per transaction; fewer when input stops coming.
constexpr size_t kBatch = 500;

std::vector<std::string> Given(const std::vector<std::string>& names) {
  std::vector<std::string> given;
  for (const std::string& name : names) {
    if (FlagGiven(name)) given.push_back("--" + name);
  }
  return given;
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in || std::filesystem::is_directory(path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--payload_file ", path, " cannot be read: ", std::strerror(errno)));
  }
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// What the database would refuse of `item`, said before anything is sent,
// as the end of a sentence about it.
absl::Status CheckItem(const NewItem& item) {
  if (item.key) {
    if (absl::Status s = CheckKeyText(*item.key); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("its key ", s.message()));
    }
  }
  if (item.payload.size() <= kDefaultMaxPayloadBytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "its payload of ", item.payload.size(), " bytes is over the limit of ",
      kDefaultMaxPayloadBytes,
      " per item; keep large data in a table of its own and send its key"));
}

// Sends the items of stdin or a file, a batch per transaction (each under
// the Producer's idempotency key), as lines arrive.
class InputSender {
 public:
  InputSender(Producer& producer, bool print_ids)
      : producer_(producer), print_ids_(print_ids) {}

  absl::Status Run(const std::string& path, InputFormat format,
                   const std::string& delimiter, absl::Duration delay) {
    const bool stdin_input = path == "-";
    const int fd = stdin_input ? STDIN_FILENO : open(path.c_str(), O_RDONLY);
    if (fd < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--input ", path, " cannot be opened: ", std::strerror(errno)));
    }
    const std::string name =
        stdin_input ? "standard input" : absl::StrCat("--input ", path);
    absl::Status s = Read(fd, name, format, delimiter, delay);
    if (!stdin_input) close(fd);
    return s;
  }

  int64_t sent() const { return sent_; }

 private:
  absl::Status Read(int fd, const std::string& name, InputFormat format,
                    const std::string& delimiter, absl::Duration delay) {
    LineReader reader(fd);
    std::string line;
    int64_t number = 0;
    while (reader.Next(&line)) {
      ++number;
      if (line.empty()) continue;
      absl::StatusOr<NewItem> item = format == InputFormat::kJson
                                         ? ParseJsonLine(line, delay)
                                         : ParseTextLine(line, delimiter);
      if (format == InputFormat::kText) item->delay = delay;
      const std::string where = absl::StrCat("line ", number, " of ", name);
      if (item.ok()) {
        if (absl::Status s = CheckItem(*item); !s.ok()) item = s;
      }
      if (!item.ok()) {
        // What came before the bad line goes; nothing after it.
        RETURN_IF_ERROR(Flush());
        return absl::FailedPreconditionError(absl::StrCat(
            where, " is not an item: ", item.status().message(), ". The ",
            sent_,
            " item(s) before it were sent, none from it on: fix it "
            "and send the input from that line"));
      }
      if (batch_.empty()) first_line_ = number;
      last_line_ = number;
      batch_.push_back(*std::move(item));
      if (batch_.size() >= kBatch || !reader.Ready()) RETURN_IF_ERROR(Flush());
    }
    RETURN_IF_ERROR(Flush());
    if (!reader.status().ok()) {
      return absl::UnavailableError(absl::StrCat(
          name, ": ", reader.status().message(), " after ", number,
          " line(s); the ", sent_, " item(s) read before were sent"));
    }
    return absl::OkStatus();
  }

  absl::Status Flush() {
    if (batch_.empty()) return absl::OkStatus();
    absl::StatusOr<std::vector<std::string>> ids = producer_.Enqueue(batch_);
    if (absl::IsUnknown(ids.status())) {
      // Sending these lines again from a new run (a new producer, new
      // idempotency keys) could add them twice.
      return absl::Status(
          ids.status().code(),
          absl::StrCat("the items of lines ", first_line_, " to ", last_line_,
                       " may or may not have been enqueued: the commit's "
                       "answer was lost (",
                       ids.status().message(), "). The ", sent_,
                       " item(s) before them were sent. Check the group for "
                       "them before sending those lines again"));
    }
    if (!ids.ok()) {
      return absl::Status(
          ids.status().code(),
          absl::StrCat("the items of lines ", first_line_, " to ", last_line_,
                       " were not sent (", sent_,
                       " item(s) before them were): ", ids.status().message()));
    }
    sent_ += static_cast<int64_t>(ids->size());
    if (print_ids_) {
      for (const std::string& id : *ids) std::printf("%s\n", id.c_str());
      std::fflush(stdout);
    }
    batch_.clear();
    return absl::OkStatus();
  }

  Producer& producer_;
  const bool print_ids_;
  std::vector<NewItem> batch_;
  int64_t first_line_ = 0;
  int64_t last_line_ = 0;
  int64_t sent_ = 0;
};

absl::Status SendOwnItems(const ProduceTarget& target, bool from_input) {
  const std::string& input = absl::GetFlag(FLAGS_input);
  ASSIGN_OR_RETURN(const InputFormat format,
                   ParseInputFormat(absl::GetFlag(FLAGS_format)));
  const absl::Duration delay = absl::GetFlag(FLAGS_delay);
  if (delay < absl::ZeroDuration() || delay == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--delay must be 0 or more, such as 30s or 5m, got ",
                     absl::FormatDuration(delay)));
  }
  NewItem one;
  if (!from_input) {
    if (FlagGiven("payload") && FlagGiven("payload_file")) {
      return absl::InvalidArgumentError(
          "give the payload once: --payload TEXT or --payload_file FILE");
    }
    if (FlagGiven("payload_file")) {
      ASSIGN_OR_RETURN(one.payload,
                       ReadWholeFile(absl::GetFlag(FLAGS_payload_file)));
    } else {
      one.payload = absl::GetFlag(FLAGS_payload);
    }
    if (const std::string key = absl::GetFlag(FLAGS_key); !key.empty()) {
      one.key = key;
    }
    one.delay = delay;
    if (absl::Status s = CheckItem(one); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the item was not sent: ", s.message()));
    }
  }
  std::unique_ptr<Producer> producer;
  RETURN_IF_ERROR(
      RetryWhileUnavailable(target.retry_for, [&]() -> absl::Status {
        ASSIGN_OR_RETURN(
            producer, Producer::Create({.dsn = target.dsn,
                                        .group = target.group,
                                        .topic = target.topic,
                                        .notify = absl::GetFlag(FLAGS_notify),
                                        .pool_mode = target.mode,
                                        .retry_for = target.retry_for,
                                        .logger = CliLogger()}));
        return absl::OkStatus();
      }));
  const bool print_ids = absl::GetFlag(FLAGS_print_ids);
  const absl::Time start = absl::Now();
  int64_t sent = 0;
  if (from_input) {
    InputSender sender(*producer, print_ids);
    const absl::Status s = sender.Run(
        input, format, KeyDelimiter(absl::GetFlag(FLAGS_key_delimiter)), delay);
    sent = sender.sent();
    RETURN_IF_ERROR(s);
  } else {
    ASSIGN_OR_RETURN(const std::vector<std::string> ids,
                     producer->Enqueue({one}));
    sent = 1;
    if (print_ids) std::printf("%s\n", ids[0].c_str());
  }
  // With --print_ids standard output holds only the ids.
  const std::string summary = absl::StrCat(
      target.topic.empty()
          ? absl::StrCat("produced ", sent, " item(s) into ", target.group)
          : absl::StrCat("published ", sent, " item(s) to topic ", target.topic,
                         " (each to every group that reads it)"),
      " in ",
      absl::FormatDuration(
          absl::Trunc(absl::Now() - start, absl::Milliseconds(1))));
  if (print_ids) {
    CliLogger()->info("{}", summary);
  } else {
    std::printf("%s\n", summary.c_str());
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunProduce(const Args&) {
  const bool to_topic = FlagGiven("topic");
  if (to_topic && FlagGiven("group")) {
    return absl::InvalidArgumentError(
        "give --group or --topic, not both: a topic reaches every group "
        "that reads it");
  }
  if (to_topic && absl::GetFlag(FLAGS_topic).empty()) {
    return absl::InvalidArgumentError(
        "--topic names no topic; give a topic's name (`sqlgroup topic "
        "list` shows them)");
  }
  if (!to_topic && absl::GetFlag(FLAGS_group).empty()) {
    return absl::InvalidArgumentError(
        "--group (or --topic) is required: the group, or the topic, that "
        "gets the items");
  }
  const std::vector<std::string> one =
      Given({"key", "payload", "payload_file"});
  const std::vector<std::string> input = Given({"input"});
  const std::vector<std::string> generator =
      Given({"generate", "count", "keys", "payload_bytes", "rate"});
  const int sources = !one.empty() + !input.empty() + !generator.empty();
  if (sources == 0) {
    return absl::InvalidArgumentError(
        "say what to produce: --key K --payload TEXT (or --payload_file F) "
        "for one item, --input FILE (- for standard input) for one item per "
        "line, or --generate --count N for generated load");
  }
  if (sources > 1) {
    std::vector<std::string> all = one;
    all.insert(all.end(), input.begin(), input.end());
    all.insert(all.end(), generator.begin(), generator.end());
    return absl::InvalidArgumentError(absl::StrCat(
        "give one source of items: --key/--payload/--payload_file (one "
        "item), --input (one per line) or --generate (load); got ",
        absl::StrJoin(all, ", ")));
  }
  if (input.empty()) {
    if (const std::vector<std::string> stray =
            Given({"format", "key_delimiter"});
        !stray.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(absl::StrJoin(stray, " and "),
                       stray.size() == 1 ? " describes" : " describe",
                       " the lines of --input; without it there are none"));
    }
  }
  if (!generator.empty() && (FlagGiven("print_ids") || FlagGiven("delay"))) {
    return absl::InvalidArgumentError(
        "--print_ids and --delay are for your own items, not --generate");
  }
  const absl::Duration retry_for = absl::GetFlag(FLAGS_retry_for);
  if (retry_for < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--retry_for must not be negative, got ",
                     absl::FormatDuration(retry_for)));
  }
  ProduceTarget target{.dsn = ResolveDsn(absl::GetFlag(FLAGS_dsn)),
                       .group = to_topic ? "" : absl::GetFlag(FLAGS_group),
                       .topic = to_topic ? absl::GetFlag(FLAGS_topic) : "",
                       .retry_for = retry_for};
  ASSIGN_OR_RETURN(target.mode, PoolModeFlag());
  if (!generator.empty()) {
    if (!absl::GetFlag(FLAGS_generate)) {
      // The generator's flags worked alone before --generate existed:
      // scripts that use them keep working, and are told.
      CliLogger()->warn(
          "produce {} generates load: write --generate with it (produce "
          "--generate --count N ...); to send your own items use --key and "
          "--payload, or --input",
          absl::StrJoin(generator, " "));
    }
    return RunGenerate(target);
  }
  return SendOwnItems(target, !input.empty());
}

}  // namespace sqlgroup::cli
