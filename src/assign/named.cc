#include <memory>
#include <string>

#include "sqlgroup/assignor.h"

namespace sqlgroup {

std::shared_ptr<const Assignor> AssignorNamed(const std::string& name) {
  if (name == "lexical") return std::make_shared<LexicalRangeAssignor>();
  if (name == "sticky") return std::make_shared<StickyAssignor>();
  return nullptr;
}

}  // namespace sqlgroup
