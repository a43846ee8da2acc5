#include "cli/command_line.h"

#include <algorithm>
#include <cctype>

#include "absl/flags/reflection.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace sqlgroup::cli {
namespace {

bool IsBoolFlag(const std::string& name) {
  const absl::CommandLineFlag* f = absl::FindCommandLineFlag(name);
  return f != nullptr && f->IsOfType<bool>();
}

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1,
                         diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string EnvironmentName(const std::string& flag) {
  return absl::StrCat("SQLGROUP_", absl::AsciiStrToUpper(flag));
}

std::string ClosestFlag(const std::string& name,
                        const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, name.size() / 3) + 1;
  for (const std::string& c : candidates) {
    const size_t d = EditDistance(name, c);
    if (d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

absl::StatusOr<CommandLine> ReadCommandLine(
    const std::vector<std::string>& argv,
    const std::vector<std::string>& known) {
  CommandLine cl;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& token = argv[i];
    if (token == "--") {  // the rest are words, as Abseil takes them too
      cl.args.insert(cl.args.end(), argv.begin() + i, argv.end());
      cl.words.insert(cl.words.end(), argv.begin() + i + 1, argv.end());
      break;
    }
    if (token.size() < 2 || token[0] != '-') {
      if (cl.words.empty() && token == "help") {
        cl.help = true;
        continue;
      }
      if (cl.words.empty() && token == "version") {
        cl.version = true;
        continue;
      }
      cl.words.push_back(token);
      cl.args.push_back(token);
      continue;
    }
    const size_t eq = token.find('=');
    const size_t dashes = token[1] == '-' ? 2 : 1;
    const std::string spelt = token.substr(
        dashes, eq == std::string::npos ? std::string::npos : eq - dashes);
    std::string name = absl::StrReplaceAll(spelt, {{"-", "_"}});
    if (name == "help" || name == "h" || name == "helpshort") {
      cl.help = true;
      continue;
    }
    if (name == "version") {
      cl.version = true;
      continue;
    }
    // --nonotify, --no-notify: a bool flag's negation, as Abseil spells it.
    bool negated = false;
    if (absl::FindCommandLineFlag(name) == nullptr) {
      for (const std::string prefix : {"no_", "no"}) {
        if (name.rfind(prefix, 0) == 0 &&
            IsBoolFlag(name.substr(prefix.size()))) {
          name = "no" + name.substr(prefix.size());
          negated = true;
          break;
        }
      }
    }
    if (absl::FindCommandLineFlag(name) == nullptr && !negated) {
      std::string message = absl::StrCat("unknown flag --", spelt);
      const std::string close = ClosestFlag(name, known);
      if (!close.empty())
        absl::StrAppend(&message, "; did you mean --", close, "?");
      absl::StrAppend(&message,
                      " (`sqlgroup COMMAND --help` lists a command's flags)");
      return absl::InvalidArgumentError(message);
    }
    // "--flag value": the value is the next word, not a command word. Joined
    // as --flag=value, so a value that begins with a dash (--input -) is
    // taken as it is.
    std::string value = eq == std::string::npos ? "" : token.substr(eq);
    if (eq == std::string::npos && !negated && !IsBoolFlag(name) &&
        i + 1 < argv.size()) {
      value = "=" + argv[++i];
    }
    cl.args.push_back(absl::StrCat("--", name, value));
  }
  return cl;
}

std::string NameTheEnvironment(const CommandLine& cl, std::string message) {
  for (const std::string& flag : cl.from_environment) {
    const std::string named = "--" + flag;
    const std::string variable = EnvironmentName(flag);
    bool names = false;
    for (size_t at = message.find(named); at != std::string::npos;
         at = message.find(named, at + 1)) {
      const size_t end = at + named.size();
      if (end == message.size() ||
          !(std::isalnum(static_cast<unsigned char>(message[end])) ||
            message[end] == '_')) {
        names = true;
        break;
      }
    }
    if (names && message.find(variable) == std::string::npos) {
      absl::StrAppend(&message, " (", named, " came from $", variable, ")");
    }
  }
  return message;
}

void AddEnvironmentFlags(
    CommandLine& cl, const std::vector<std::string>& flags,
    const std::function<const char*(const std::string&)>& getenv) {
  std::vector<std::string> from_env;
  for (const std::string& flag : flags) {
    const bool given =
        std::any_of(cl.args.begin(), cl.args.end(), [&](const std::string& a) {
          return a == "--" + flag || a.rfind("--" + flag + "=", 0) == 0 ||
                 a == "--no" + flag;
        });
    if (given) continue;
    if (const char* value = getenv(EnvironmentName(flag))) {
      from_env.push_back(absl::StrCat("--", flag, "=", value));
      cl.from_environment.push_back(flag);
    }
  }
  cl.args.insert(cl.args.begin(), from_env.begin(), from_env.end());
}

namespace {

// What a value of `flag`'s type looks like, for a person.
std::string ValueShape(const absl::CommandLineFlag& flag) {
  if (flag.IsOfType<absl::Duration>()) {
    return "a duration with its unit, such as 5s, 500ms or 1m30s";
  }
  if (flag.IsOfType<int32_t>() || flag.IsOfType<int64_t>()) {
    return "a whole number";
  }
  if (flag.IsOfType<double>()) return "a number, such as 0.05";
  if (flag.IsOfType<bool>()) return "true or false";
  return "";
}

}  // namespace

absl::Status CheckFlagValues(const CommandLine& cl) {
  for (size_t i = 0; i < cl.args.size(); ++i) {
    const std::string& arg = cl.args[i];
    if (arg == "--") break;
    if (arg.rfind("--", 0) != 0) continue;
    const size_t eq = arg.find('=');
    const std::string name =
        arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr) continue;  // --noX, or refused already
    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (flag->IsOfType<bool>()) {
      continue;
    } else if (i + 1 < cl.args.size()) {
      value = cl.args[++i];
    }
    const std::string shape = ValueShape(*flag);
    if (shape.empty()) continue;  // strings: each command checks its own
    std::string error;
    if (flag->ParseFrom(value, &error)) continue;
    const bool from_env =
        std::find(cl.from_environment.begin(), cl.from_environment.end(),
                  name) != cl.from_environment.end();
    return absl::InvalidArgumentError(absl::StrCat(
        "--", name, "=", value,
        from_env ? absl::StrCat(" (from $", EnvironmentName(name), ")") : "",
        ": expected ", shape));
  }
  return absl::OkStatus();
}

}  // namespace sqlgroup::cli
