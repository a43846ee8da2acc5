// The parts a member owns, indexed by their key ranges: which of them hold
// any key of an announced range, at a cost that follows the ranges asked
// about (a lookup each, plus the parts found), not the parts owned.
#ifndef SQLGROUP_MEMBER_RANGE_INDEX_H_
#define SQLGROUP_MEMBER_RANGE_INDEX_H_

#include <map>
#include <utility>
#include <vector>

#include "keyspace.h"

namespace sqlgroup {

class RangeIndex {
 public:
  void Insert(int part, const KeyRange& range);
  // Removes `part` with the range it was inserted with.
  void Erase(int part, const KeyRange& range);
  // The parts whose ranges overlap any of `ranges`, ascending, each once.
  std::vector<int> Overlapping(const std::vector<KeyRange>& ranges) const;

 private:
  // By first key: (part, last key). Ranges may overlap (a part count
  // changing: parts of both counts for a moment).
  std::multimap<Uuid128, std::pair<int, Uuid128>> by_first_;
  // How many ranges of each width (last - first) it holds: the widest
  // bounds how far before a range asked about an overlapping one starts,
  // and narrows again when the wide ones go (after a part count grew).
  std::map<Uuid128, int> widths_;
};

}  // namespace sqlgroup

#endif  // SQLGROUP_MEMBER_RANGE_INDEX_H_
