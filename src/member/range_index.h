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
  // The widest range inserted so far: an overlapping range starts at most
  // this far before the range asked about. (Never narrowed: a wider bound
  // only costs a few more steps.)
  Uuid128 widest_ = 0;
};

}  // namespace sqlgroup

#endif  // SQLGROUP_MEMBER_RANGE_INDEX_H_
