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

#include <memory>
#include <string>
#include <utility>
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
  // The same, knowing who owns each part now: `current[p]` is the session
  // that owns part p, or empty (a session that is not in `sessions` counts
  // as no owner). An assignor that does not care (the lexical one) ignores
  // it; a sticky one keeps parts where they are.
  virtual Assignment Assign(std::vector<std::string> sessions, int parts,
                            const std::vector<std::string>& current) const {
    (void)current;
    return Assign(std::move(sessions), parts);
  }
};

// Kafka's RangeAssignor over sessions in lexical order: session i of N gets
// the contiguous block [floor(i*P/N), floor((i+1)*P/N)). Sizes differ by at
// most one; with P < N some sessions get nothing.
class LexicalRangeAssignor final : public Assignor {
 public:
  using Assignor::Assign;
  Assignment Assign(std::vector<std::string> sessions,
                    int parts) const override;
};

// Moves only what balance requires. Every session gets floor(P/N) parts
// and P mod N of them one more: those that hold more than floor(P/N) now,
// then the others, each in lexical order. A session keeps its lowest
// current parts up to its quota; the parts nobody keeps go, in ascending
// order, to the sessions short of their quota, in lexical order.
// Deterministic from (sessions, current owners), balanced to within one,
// and idempotent (its own result as `current` gives the same result). A
// join moves at most ceil(P/(N+1)) parts and a leave only the leaver's,
// from a balanced start. Without current owners it gives contiguous
// blocks in lexical order, the larger ones first.
class StickyAssignor final : public Assignor {
 public:
  Assignment Assign(std::vector<std::string> sessions,
                    int parts) const override;
  Assignment Assign(std::vector<std::string> sessions, int parts,
                    const std::vector<std::string>& current) const override;
};

// The assignors a group can name (groups.assignor): "lexical" and
// "sticky". Null for any other name.
std::shared_ptr<const Assignor> AssignorNamed(const std::string& name);

}  // namespace sqlgroup

#endif  // SQLGROUP_ASSIGNOR_H_
