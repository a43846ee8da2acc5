#include "store/notifications.h"

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace sqlgroup::store {

std::string SessionChannel(const std::string& session) {
  return absl::StrCat(kChannel, ":", session);
}

std::string MembershipChanged(const std::string& group) {
  return absl::StrCat("rebalance:", group);
}
std::string SchemaChanged(int version) {
  return absl::StrCat("schema:", version);
}

bool IsSchemaChanged(const std::string& payload) {
  return absl::StartsWith(payload, "schema:");
}

std::string ItemsArrived(const std::string& group) {
  return absl::StrCat("items:", group);
}
std::string ItemsDueIn(const std::string& group, absl::Duration delay) {
  return absl::StrCat(ItemsArrived(group), "@",
                      absl::ToInt64Microseconds(delay));
}
std::optional<absl::Duration> ParseItemsDueIn(const std::string& group,
                                              const std::string& payload) {
  const std::string prefix = absl::StrCat(ItemsArrived(group), "@");
  int64_t micros = 0;
  if (!absl::StartsWith(payload, prefix) ||
      !absl::SimpleAtoi(absl::string_view(payload).substr(prefix.size()),
                        &micros) ||
      micros < 0) {
    return std::nullopt;
  }
  return absl::Microseconds(micros);
}

std::string ItemsArrivedIn(const std::string& group,
                           const std::vector<std::string>& ids) {
  std::set<std::string> prefixes;
  for (const std::string& id : ids) prefixes.insert(id.substr(0, 4));
  if (prefixes.size() > kMaxAnnouncedPrefixes) return ItemsArrived(group);
  return absl::StrCat(ItemsArrived(group), "#", absl::StrJoin(prefixes, ","));
}

std::optional<std::vector<KeyRange>> ParseItemsArrivedIn(
    const std::string& group, const std::string& payload) {
  const std::string head = absl::StrCat(ItemsArrived(group), "#");
  if (!absl::StartsWith(payload, head)) return std::nullopt;
  std::vector<KeyRange> ranges;
  for (absl::string_view prefix :
       absl::StrSplit(absl::string_view(payload).substr(head.size()), ',')) {
    uint32_t bits = 0;
    if (prefix.size() != 4 ||
        !std::all_of(prefix.begin(), prefix.end(), absl::ascii_isxdigit) ||
        !absl::SimpleHexAtoi(prefix, &bits)) {
      return std::nullopt;
    }
    const Uuid128 first = Uuid128(bits) << 112;
    ranges.push_back({first, first | ((Uuid128(1) << 112) - 1)});
  }
  return ranges;
}

}  // namespace sqlgroup::store
