#include "member/range_index.h"

#include <algorithm>

namespace sqlgroup {

void RangeIndex::Insert(int part, const KeyRange& range) {
  by_first_.emplace(range.first, std::make_pair(part, range.last));
  ++widths_[range.last - range.first];
}

void RangeIndex::Erase(int part, const KeyRange& range) {
  auto [from, to] = by_first_.equal_range(range.first);
  for (auto it = from; it != to; ++it) {
    if (it->second.first == part) {
      auto width = widths_.find(it->second.second - it->first);
      if (--width->second == 0) widths_.erase(width);
      by_first_.erase(it);
      return;
    }
  }
}

std::vector<int> RangeIndex::Overlapping(
    const std::vector<KeyRange>& ranges) const {
  std::vector<int> parts;
  if (by_first_.empty()) return parts;
  const Uuid128 widest = widths_.rbegin()->first;
  for (const KeyRange& r : ranges) {
    auto it = r.first > widest ? by_first_.lower_bound(r.first - widest)
                               : by_first_.begin();
    for (; it != by_first_.end() && it->first <= r.last; ++it) {
      if (it->second.second >= r.first) parts.push_back(it->second.first);
    }
  }
  std::sort(parts.begin(), parts.end());
  parts.erase(std::unique(parts.begin(), parts.end()), parts.end());
  return parts;
}

}  // namespace sqlgroup
