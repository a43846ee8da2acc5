#include "cli/handlers/item_json.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "cli/describe_format.h"

namespace sqlgroup::cli {

std::string ItemJson(const Item& item) {
  return absl::StrCat(
      "{\"id\":", JsonString(item.id),
      ",\"key\":", item.key ? JsonString(*item.key) : "null",
      ",\"payload\":", JsonString(absl::Base64Escape(item.payload)),
      ",\"attempt\":", item.attempt, ",\"part\":", item.part,
      ",\"enqueued_at\":",
      JsonString(absl::FormatTime("%Y-%m-%dT%H:%M:%E6S%Ez", item.enqueued_at,
                                  absl::UTCTimeZone())),
      "}");
}

}  // namespace sqlgroup::cli
