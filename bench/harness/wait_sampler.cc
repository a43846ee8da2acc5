#include "wait_sampler.h"

#include <algorithm>
#include <pqxx/pqxx>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common.h"

namespace sqlgroup::bench {

std::string WaitSummary::Json() const {
  std::vector<std::pair<int64_t, std::string>> top;
  for (const auto& [event, n] : events) top.emplace_back(n, event);
  std::sort(top.rbegin(), top.rend());
  std::string events_json = "{";
  for (size_t i = 0; i < top.size() && i < 6; ++i) {
    absl::StrAppend(&events_json, i ? ", " : "", JsonString(top[i].second),
                    ": ", top[i].first);
  }
  events_json += "}";
  return absl::StrCat("{\"ticks\": ", ticks, ", \"lock\": ", lock_waits,
                      ", \"lwlock\": ", lwlock_waits, ", \"active\": ", active,
                      ", \"top\": ", events_json, "}");
}

WaitSampler::WaitSampler(std::string dsn, std::string app_pattern,
                         absl::Duration every)
    : dsn_(std::move(dsn)), pattern_(std::move(app_pattern)), every_(every) {}

WaitSampler::~WaitSampler() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void WaitSampler::Start() {
  thread_ = std::thread([this] { Run(); });
}

WaitSummary WaitSampler::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  return summary_;
}

void WaitSampler::Run() {
  auto conn = Connect(dsn_, "bench-sampler");
  conn->prepare("sample",
                "SELECT coalesce(wait_event_type, 'CPU'), "
                "coalesce(wait_event, ''), count(*) FROM pg_stat_activity "
                "WHERE state = 'active' AND application_name LIKE $1 "
                "GROUP BY 1, 2");
  absl::Time next = absl::Now();
  while (!stop_) {
    {
      pqxx::nontransaction tx(*conn);
      for (const pqxx::row& row : tx.exec_prepared("sample", pattern_)) {
        const std::string type = row[0].as<std::string>();
        const int64_t n = row[2].as<int64_t>();
        const std::string event =
            type == "CPU" ? type : absl::StrCat(type, ":", row[1].c_str());
        summary_.events[event] += n;
        summary_.active += n;
        if (type == "Lock") summary_.lock_waits += n;
        if (type == "LWLock") summary_.lwlock_waits += n;
      }
      ++summary_.ticks;
    }
    next += every_;
    const absl::Duration left = next - absl::Now();
    if (left > absl::ZeroDuration()) absl::SleepFor(left);
  }
}

}  // namespace sqlgroup::bench
