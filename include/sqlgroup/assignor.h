// Assignors decide which live session should own each part of a group.
// Every member computes the same assignment from the same input (the live
// sessions, sorted by id), so no coordinator is needed.
//
//   sqlgroup::LexicalRangeAssignor assignor;
//   sqlgroup::Assignment a = assignor.Assign({"a", "b", "c"}, 8);
//   // a.parts_of("b") == {2, 3, 4}
//
// Assignors are pure: no database, no clock, no logging. Thread safety: the
// shipped assignors are stateless and safe to share between threads.
#ifndef SQLGROUP_ASSIGNOR_H_
#define SQLGROUP_ASSIGNOR_H_

#include <string>
#include <vector>

namespace sqlgroup {

// The target owner of every part: owner[p] is an index into `sessions`.
struct Assignment {
  std::vector<std::string> sessions;  // sorted, unique
  std::vector<int> owner;             // size P; each in [0, sessions.size())

  // The parts targeted at `session`, ascending; empty if it is not a member.
  std::vector<int> parts_of(const std::string& session) const;
};

class Assignor {
 public:
  virtual ~Assignor() = default;
  // `sessions` may come in any order and may contain duplicates (they are
  // sorted and de-duplicated first); `parts` >= 1. With no sessions every
  // owner is -1.
  virtual Assignment Assign(std::vector<std::string> sessions,
                            int parts) const = 0;
};

// Kafka's RangeAssignor over sessions in lexical order: session i of N gets
// the contiguous block [floor(i*P/N), floor((i+1)*P/N)). Sizes differ by at
// most one; with P < N some sessions get nothing.
class LexicalRangeAssignor final : public Assignor {
 public:
  Assignment Assign(std::vector<std::string> sessions,
                    int parts) const override;
};

}  // namespace sqlgroup

#endif  // SQLGROUP_ASSIGNOR_H_
