// The NOTIFY payloads members and producers exchange, as plain strings:
// building them and reading them back. No database in here; sending one is
// store::Notify (member_store.h).
#ifndef SQLGROUP_STORE_NOTIFICATIONS_H_
#define SQLGROUP_STORE_NOTIFICATIONS_H_

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "keyspace.h"

namespace sqlgroup::store {

// NOTIFY payloads on channel "sqlgroup", which every member hears.
std::string MembershipChanged(const std::string& group);  // "rebalance:G"
std::string ItemsArrived(const std::string& group);       // "items:G"
// Items that fall due `delay` after the commit: "items:G@<microseconds>"
// ('@' is never part of a group name).
std::string ItemsDueIn(const std::string& group, absl::Duration delay);
// The delay of an ItemsDueIn payload of `group`; nullopt for anything else.
std::optional<absl::Duration> ParseItemsDueIn(const std::string& group,
                                              const std::string& payload);
// Items due now whose ids begin with the given 16-bit prefixes (the first
// four hex digits of the UUID): "items:G#0a1b,ff00" ('#' is never part of
// a group name). Members wake only the parts that hold those keys, instead
// of probing every idle part. sqlgroup.announce_items (schema 12), which
// both kinds of producer call, names at most kMaxAnnouncedPrefixes and
// sends at most kMaxTargetedAnnouncements of these per transaction, then
// the plain ItemsArrived (which PostgreSQL folds into one).
// ItemsArrived when `ids` have more than kMaxAnnouncedPrefixes prefixes.
std::string ItemsArrivedIn(const std::string& group,
                           const std::vector<std::string>& ids);
// The key ranges an ItemsArrivedIn payload of `group` names; nullopt for
// anything else (a malformed list included).
std::optional<std::vector<KeyRange>> ParseItemsArrivedIn(
    const std::string& group, const std::string& payload);
// `sqlgroup migrate` applied schema `version`: "schema:15". Members check
// again that they may run against it, and record their version once the
// schema can hold it (schema 14). Older members ignore it.
std::string SchemaChanged(int version);
bool IsSchemaChanged(const std::string& payload);
inline constexpr size_t kMaxAnnouncedPrefixes = 16;
inline constexpr int kMaxTargetedAnnouncements = 8;
inline constexpr char kChannel[] = "sqlgroup";
// One session's own channel, "sqlgroup:<id>": a part it waits for was
// freed. Addressed, so a drop wakes the member that takes the part instead
// of every member of the group.
std::string SessionChannel(const std::string& session);
inline constexpr char kPartsFreed[] = "freed";

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_NOTIFICATIONS_H_
