#include <algorithm>
#include <cstdint>
#include <map>

#include "sqlgroup/assignor.h"

namespace sqlgroup {

Assignment StickyAssignor::Assign(std::vector<std::string> sessions,
                                  int parts) const {
  return Assign(std::move(sessions), parts, {});
}

Assignment StickyAssignor::Assign(
    std::vector<std::string> sessions, int parts,
    const std::vector<std::string>& current) const {
  std::sort(sessions.begin(), sessions.end());
  sessions.erase(std::unique(sessions.begin(), sessions.end()), sessions.end());
  Assignment a;
  a.sessions = std::move(sessions);
  a.owner.assign(std::max(parts, 0), -1);
  const int n = static_cast<int>(a.sessions.size());
  if (n == 0 || parts <= 0) return a;

  // What each session holds now, lowest parts first.
  std::map<std::string, int> index;
  for (int i = 0; i < n; ++i) index[a.sessions[i]] = i;
  std::vector<std::vector<int>> held(n);
  for (int p = 0; p < parts && p < static_cast<int>(current.size()); ++p) {
    auto it = index.find(current[p]);
    if (it != index.end()) held[it->second].push_back(p);
  }

  // Quotas: floor(P/N) each, one more for P mod N sessions: first those
  // holding more than floor(P/N) (so that, while parts move, a session on
  // its way down to its quota never trades places with one on its way up),
  // then the others, each in lexical order.
  const int base = parts / n;
  int extra = parts % n;
  std::vector<int> quota(n, base);
  for (const bool over : {true, false}) {
    for (int i = 0; i < n && extra > 0; ++i) {
      const bool is_over = static_cast<int>(held[i].size()) > base;
      if (is_over == over && quota[i] == base) {
        quota[i] = base + 1;
        --extra;
      }
    }
  }

  // Each session keeps its lowest parts up to its quota; the rest of the
  // parts go, ascending, to the sessions short of theirs, in lexical order.
  for (int i = 0; i < n; ++i) {
    const int keep = std::min(quota[i], static_cast<int>(held[i].size()));
    for (int k = 0; k < keep; ++k) a.owner[held[i][k]] = i;
    quota[i] -= keep;
  }
  int i = 0;
  for (int p = 0; p < parts; ++p) {
    if (a.owner[p] != -1) continue;
    while (quota[i] == 0) ++i;  // the quotas add up to P
    a.owner[p] = i;
    --quota[i];
  }
  return a;
}

}  // namespace sqlgroup
