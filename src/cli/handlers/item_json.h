// One item as the JSON object the exec and http handlers send: one line,
// no newline inside.
//
//   {"id":"<uuid>","key":"<text>"|null,"payload":"<base64>","attempt":1,
//    "part":3,"enqueued_at":"2026-11-25T14:40:00.123456+00:00"}
#ifndef SQLGROUP_CLI_HANDLERS_ITEM_JSON_H_
#define SQLGROUP_CLI_HANDLERS_ITEM_JSON_H_

#include <string>

#include "sqlgroup/item.h"

namespace sqlgroup::cli {

std::string ItemJson(const Item& item);

}  // namespace sqlgroup::cli

#endif  // SQLGROUP_CLI_HANDLERS_ITEM_JSON_H_
