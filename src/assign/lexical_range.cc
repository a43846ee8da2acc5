#include <algorithm>
#include <cstdint>

#include "sqlgroup/assignor.h"

namespace sqlgroup {

std::vector<int> Assignment::parts_of(const std::string& session) const {
  std::vector<int> parts;
  auto it = std::lower_bound(sessions.begin(), sessions.end(), session);
  if (it == sessions.end() || *it != session) return parts;
  const int index = static_cast<int>(it - sessions.begin());
  for (int p = 0; p < static_cast<int>(owner.size()); ++p) {
    if (owner[p] == index) parts.push_back(p);
  }
  return parts;
}

Assignment LexicalRangeAssignor::Assign(std::vector<std::string> sessions,
                                        int parts) const {
  std::sort(sessions.begin(), sessions.end());
  sessions.erase(std::unique(sessions.begin(), sessions.end()), sessions.end());
  Assignment a;
  a.sessions = std::move(sessions);
  a.owner.assign(std::max(parts, 0), -1);
  const int64_t n = static_cast<int64_t>(a.sessions.size());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t begin = i * parts / n;
    const int64_t end = (i + 1) * parts / n;
    for (int64_t p = begin; p < end; ++p) a.owner[p] = static_cast<int>(i);
  }
  return a;
}

}  // namespace sqlgroup
