// Administration of sqlgroup in one database: schema migrations and the
// life cycle of consumer groups (create, alter, delete, list, describe).
//
//   auto admin = sqlgroup::Admin::Connect({.dsn = "host=db dbname=app"});
//   if (!admin.ok()) return admin.status();
//   RETURN_IF_ERROR((*admin)->Migrate().status());
//   RETURN_IF_ERROR((*admin)->CreateGroup({.name = "emails", .parts = 16}));
//   auto d = (*admin)->DescribeGroup("emails");  // members, owners, lag
//
// Thread safety: an Admin holds one connection and is not safe for
// concurrent use; give each thread its own.
#ifndef SQLGROUP_ADMIN_H_
#define SQLGROUP_ADMIN_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "sqlgroup/operations.h"
#include "sqlgroup/pool_mode.h"

namespace sqlgroup {

// How a group hands out the items of one key (sqlgroup.groups.ordering).
enum class Ordering {
  // Item n+1 of a key is not handed to any handler before item n is
  // acknowledged or dead-lettered; different keys run in parallel. A
  // dead-lettered item releases the next one of its key (unless on_dead
  // is OnDead::kHold).
  kKey,
  // Affinity only: the items of a key share a part, but may be handled
  // concurrently and in any order (unkeyed items always are).
  kNone,
};

// "key" or "none": the name stored in the database and taken by the CLI.
const char* OrderingName(Ordering ordering);
// The inverse of OrderingName; INVALID_ARGUMENT naming the allowed values
// otherwise (the message starts with the text given, for the caller to
// prefix with the flag or field it came from).
absl::StatusOr<Ordering> ParseOrdering(const std::string& text);

// What a group does with a key whose item died (sqlgroup.groups.on_dead).
enum class OnDead {
  // The key's next item goes on (what a dead letter did before 0.18).
  kRelease,
  // The key waits behind its dead letter (a pause of the key, by "on_dead
  // hold") until that is requeued or purged; ordering kKey only.
  kHold,
};
// "release" or "hold".
const char* OnDeadName(OnDead on_dead);
// The inverse of OnDeadName; INVALID_ARGUMENT as ParseOrdering.
absl::StatusOr<OnDead> ParseOnDead(const std::string& text);

// A group's settings, as stored in sqlgroup.groups.
struct GroupConfig {
  // Letters, digits and "_.-", starting with a letter or digit; 1..128.
  std::string name;
  // P: the key space is split into this many parts. 1..4096. A live
  // group's count changes with Admin::AlterParts (docs/PART_COUNT.md).
  int parts = 16;
  // A session that has not heartbeated for this long is expired and may be
  // reaped by any member: its parts move after about this long (at most one
  // heartbeat_interval more: the first member to heartbeat after the expiry
  // reaps it). >= 2x heartbeat_interval. Default 5 s.
  absl::Duration session_ttl = absl::Seconds(5);
  // How often members heartbeat. > 0 and <= session_ttl / 2. Default 1 s.
  absl::Duration heartbeat_interval = absl::Seconds(1);
  // Whether the items of one key are handed out one at a time, in enqueue
  // order (kKey), or concurrently (kNone). Fixed at creation; checked by
  // every member. Default kKey.
  Ordering ordering = Ordering::kKey;
  // Which assignor the members use to share out the parts: "lexical"
  // (contiguous blocks in the lexical order of the sessions) or "sticky"
  // (balanced, moving only what balance needs; include/sqlgroup/
  // assignor.h). Stored with the group, so every member assigns alike.
  // Default "lexical".
  std::string assignor = "lexical";
  // How long the group's dead letters are kept: its members remove those
  // that died longer ago (zero: kept until requeued or purged). 1 s or
  // more; needs schema 18. Default zero.
  absl::Duration dead_retention = absl::ZeroDuration();
  // What happens to a key whose item died (kHold: needs ordering kKey and
  // schema 18). Default kRelease.
  OnDead on_dead = OnDead::kRelease;
  // The topic the group reads (Admin::CreateTopic, docs/TOPICS.md): it
  // receives every item published to the topic after it subscribed, with
  // its own parts, members, retries and dead letters; items enqueued to
  // the group still reach it. Empty: none. Needs schema 20; changed with
  // Admin::SetGroupTopic.
  std::string topic;

  // INVALID_ARGUMENT naming the field when a value is out of range.
  absl::Status Validate() const;
};

struct AdminOptions {
  // libpq connection string (keyword/value or URI). Empty: libpq's PG*
  // environment variables.
  std::string dsn;
  // Bound on reaching the server. Default 5 s.
  absl::Duration connect_timeout = absl::Seconds(5);
  // Read migrations from this folder (sql/ of the sources) instead of the
  // ones compiled in. Empty: compiled in.
  std::string migrations_dir;
  // How the dsn reaches the database (pool_mode.h); kAuto finds out.
  PoolMode pool_mode = PoolMode::kAuto;
};

struct DeleteGroupOptions {
  // Delete the group's waiting items and dead letters with it.
  bool force = false;
};

struct LeaveGroupOptions {
  // End the session of a running static member too (it registers again at
  // once, as a new member, unless its process stops).
  bool force = false;
};

struct DeletedGroup {
  int64_t items = 0;       // waiting items deleted with the group
  int64_t dead_items = 0;  // dead letters deleted with it
};

struct MigrateOptions {
  // Migrate even when live members could not run against the new schema
  // (docs/UPGRADING.md): their sessions end in the migration's
  // transaction, their parts move to the others, and they stop taking
  // items. Without it, Migrate refuses and names them.
  bool force = false;
};

struct MigrateResult {
  int from_version = 0;
  int to_version = 0;
  std::vector<std::string> applied;  // file names; empty when up to date
  // The live members that MigrateOptions::force fenced, one line each
  // ("group G: host H pid P, sqlgroup 0.15.0 (knows schema 15)").
  std::vector<std::string> fenced;
};

// One live (or expired, not yet reaped) session of a group.
struct MemberInfo {
  std::string session_id;
  std::string instance;  // empty when not given
  std::string host;
  int pid = 0;
  absl::Time created_at;
  absl::Duration since_heartbeat;  // by the database clock
  // Neither heartbeating within the TTL nor away (waits to be reaped).
  bool expired = false;
  std::vector<int> parts;  // owned now, ascending
  // A static member (ConsumerOptions::static_timeout): its timeout; zero
  // for a dynamic member.
  absl::Duration static_timeout;
  // A static member that stopped and keeps its place and parts: how long
  // until they move to the others unless it is back; nullopt otherwise.
  std::optional<absl::Duration> away_left;
  // Database connections the member holds now (its control connection,
  // its workers' own, a listen connection) and its process's budget, as it
  // last reported them (within a second of a change); nullopt before.
  std::optional<int> connections;
  std::optional<int> connection_budget;
  // While the member's circuit breaker is open (its handler fails every
  // item: an outage of what it calls), for how long, and the last error;
  // nullopt and empty while the handler works.
  std::optional<absl::Duration> circuit_open_for;
  std::string circuit_error;
  // The sqlgroup release the member runs and the newest schema it knows,
  // as it recorded them (schema 14 on); empty and 0 for a member built
  // before 0.15, or on an older schema.
  std::string version;
  int schema = 0;
};

struct PartInfo {
  int part = 0;
  std::string owner_session;  // empty when no one owns it
  std::string owner_instance;
  int64_t epoch = 0;  // 0 when unowned
  // Set while the owner hands the part over (a rebalance or a stop) and
  // waits for its handler calls on it to return: how long it has waited.
  std::optional<absl::Duration> revoking_for;
  int64_t waiting_items = 0;  // items in the part's range not yet acked
  absl::Duration oldest_age;  // age of the oldest waiting item; 0 if none
  // Under ordering 'key': keys whose head failed and waits for its retry
  // (not due yet), holding back the key's later items; 0 under 'none'.
  int64_t blocked_keys = 0;
  // Age since enqueue of the oldest of those heads; 0 if none.
  absl::Duration oldest_blocked_age;
  std::string first_key;  // the part's key range, inclusive
  std::string last_key;
};

// Roles to give the least privileges sqlgroup needs (sql/grants/). Each
// must exist already (CREATE ROLE ... LOGIN PASSWORD ...); either may be
// empty, and both may name the same role.
struct RoleGrants {
  // Runs Consumers: reads its group, keeps its session, takes and drops
  // parts, claims, acknowledges and dead-letters items (sql/grants/
  // member.sql). No DDL, no TRUNCATE, no change to groups.
  std::string member_role;
  // Runs Producers: reads groups, inserts items (sql/grants/producer.sql).
  std::string producer_role;
  // Operates the items (sqlgroup/operations.h): lists, shows, requeues and
  // purges dead letters, lists and shows waiting items, pauses and
  // resumes groups and keys, through the schema's functions only
  // (sql/grants/operator.sql). Reads groups; writes no table itself.
  std::string operator_role;
  // The groups the roles above may act on: names, or patterns whose *
  // stands for any characters. Empty: every group, also those created
  // later. The grant replaces whatever groups the roles had.
  std::vector<std::string> groups;
  // The topics producer_role may publish to (schema 20), names or
  // patterns as above. Empty: every topic when `groups` is empty too,
  // else none. Replaces whatever topics it had.
  std::vector<std::string> topics;
};

// A group that reads a topic.
struct TopicSubscriber {
  std::string group;
  absl::Time subscribed_at;  // database clock
  // Its waiting items (from the topic or enqueued to it), and the age of
  // the oldest; counted by Admin::DescribeTopic only.
  int64_t waiting = 0;
  absl::Duration oldest_age;
};

// A topic (schema 20): a named stream that several groups read, each at
// its own pace (docs/TOPICS.md).
struct TopicInfo {
  std::string name;
  absl::Time created_at;                // database clock
  std::string created_by;               // the role that created it
  std::vector<TopicSubscriber> groups;  // by name
  // Items published to it so far (publishes that rolled back included);
  // Admin::DescribeTopic only, -1 otherwise or when the role may not read
  // it.
  int64_t published = -1;
};

// A change of a group's part count (Admin::AlterParts).
struct PartsChange {
  int from_parts = 0;
  int to_parts = 0;
  absl::Time at;  // database clock
  // Parts of the old count still owned: the change is in progress while
  // any are (their members drain and drop them; a dead member's go with
  // its session after the TTL). Items never move.
  int old_parts_owned = 0;
};

struct GroupDescription {
  GroupConfig config;
  // The last change of the part count, if the group has had one.
  std::optional<PartsChange> last_parts_change;
  std::vector<MemberInfo> members;  // lexical order of session id
  std::vector<PartInfo> parts;      // part order
  int64_t dead_items = 0;
  // The group's pauses (the whole group's first, then keys'); empty when
  // it runs, and on a schema before 17.
  std::vector<Pause> pauses;
  // The database's schema version, and the oldest schema a member may
  // know to run against it (docs/UPGRADING.md).
  int schema_version = 0;
  int members_from = 0;
};

class Admin {
 public:
  // Connects; does not check the schema (Migrate may be what comes next).
  // UNAVAILABLE when the database cannot be reached (message names the
  // masked target and the reason).
  static absl::StatusOr<std::unique_ptr<Admin>> Connect(AdminOptions options);
  ~Admin();

  // Brings the schema to the newest version this library knows. Idempotent;
  // safe to run from several processes at once. FAILED_PRECONDITION when
  // the database is newer than this library, or when live members know a
  // schema too old to run against the next migration (each named; the
  // migrations before it are applied) unless options.force; NOT_FOUND for
  // a missing migrations_dir; a failed migration changes nothing.
  absl::StatusOr<MigrateResult> Migrate(const MigrateOptions& options = {});
  // The recorded schema version, 0 when there is no sqlgroup schema.
  absl::StatusOr<int> SchemaVersion();
  // OK when this library may run against the database's schema: its own
  // (kSchemaVersion), an older one it serves (kOldestServedSchema on), or a
  // newer one that accepts it (docs/UPGRADING.md); FAILED_PRECONDITION
  // saying what to do otherwise.
  absl::Status CheckSchema();

  // ALREADY_EXISTS when the name is taken; INVALID_ARGUMENT from Validate().
  absl::Status CreateGroup(const GroupConfig& config);
  // Changes TTL and/or heartbeat; members pick them up on their next
  // heartbeat. NOT_FOUND, INVALID_ARGUMENT.
  absl::Status AlterGroup(const std::string& name,
                          std::optional<absl::Duration> session_ttl,
                          std::optional<absl::Duration> heartbeat_interval);
  // Sets how long the group's dead letters are kept (zero: until they are
  // requeued or purged); its members remove older ones within about their
  // lag_interval. NOT_FOUND, INVALID_ARGUMENT, FAILED_PRECONDITION on a
  // schema before 18 (run `sqlgroup migrate`).
  absl::Status AlterDeadRetention(const std::string& name,
                                  absl::Duration dead_retention);
  // Sets what happens to a key whose item dies from now on. kHold holds
  // no key for dead letters already there; kRelease lifts every hold of
  // the group at once. INVALID_ARGUMENT (kHold under ordering kNone),
  // NOT_FOUND, FAILED_PRECONDITION on a schema before 18, or for kHold
  // while a member of a release before 0.18 runs in the group (it would
  // hand out the rest of a batch whose item died; each one named).
  absl::Status AlterOnDead(const std::string& name, OnDead on_dead);
  // Changes a live group's part count to `parts` (1..4096), up or down:
  // no item moves. Running members drain and drop their parts of the old
  // count, then take the new ones; the database refuses any take whose
  // range overlaps a part of the other count still owned, so no two
  // members ever run overlapping key ranges, and every key stays in one
  // part (its place in the key space does not depend on the count).
  // Returns the change (from == to: nothing to do). INVALID_ARGUMENT (out
  // of range), NOT_FOUND, FAILED_PRECONDITION while an earlier change is
  // still in progress (saying how many of its old parts are still owned).
  absl::StatusOr<PartsChange> AlterParts(const std::string& name, int parts);
  // Deletes the group with its sessions, parts, items and dead items.
  // NOT_FOUND when there is no such group.
  absl::Status DeleteGroup(const std::string& name);
  // The same, saying how many items and dead items went; without
  // options.force, a group that holds any is refused (FAILED_PRECONDITION
  // saying how many) and nothing changes.
  absl::StatusOr<DeletedGroup> DeleteGroup(const std::string& name,
                                           const DeleteGroupOptions& options);
  // A static member (ConsumerOptions::static_timeout) that is away (its
  // process stopped) leaves for good: its session is deleted and its parts
  // move at once (scale-down). NOT_FOUND when the group has no static
  // member named `instance`; FAILED_PRECONDITION, changing nothing, when
  // the member is running (it heartbeated within the group's TTL and did
  // not say it went away), naming its host and pid: a running process
  // registers again at once. Stop it first, or give options.force.
  absl::Status LeaveGroup(const std::string& group, const std::string& instance,
                          const LeaveGroupOptions& options = {});
  absl::StatusOr<std::vector<GroupConfig>> ListGroups();
  // Gives each role of `roles` exactly the privileges on the sqlgroup
  // schema that its use needs, taking away any others it had there, in one
  // transaction. Idempotent; run it again after every Migrate(), which may
  // add tables. The connection's role must own the schema's tables (the
  // role that ran Migrate) or be a superuser. INVALID_ARGUMENT (no role
  // given), NOT_FOUND (a role does not exist), FAILED_PRECONDITION
  // (schema), PERMISSION_DENIED.
  absl::Status GrantRoles(const RoleGrants& roles);
  absl::StatusOr<GroupConfig> GetGroup(const std::string& name);
  // Members, every part's owner and epoch, its keys blocked behind a retry
  // (read from an index of the items that failed, so the cost is theirs,
  // not the backlog's), and (when `count_lag`) each part's lag. Counting
  // lag reads the group's items index, so it costs O(items) on a large
  // backlog; without it, describe is cheap enough to poll.
  absl::StatusOr<GroupDescription> DescribeGroup(const std::string& name,
                                                 bool count_lag = true);

  // Operating the items (sqlgroup/operations.h, docs/OPERATIONS.md). Each
  // is one transaction through a function of the schema; errors are
  // sentences: NOT_FOUND (no such group, dead letter or item),
  // INVALID_ARGUMENT (a selection not exactly one, a bad id or value),
  // FAILED_PRECONDITION (a schema too old: migrate), PERMISSION_DENIED
  // (the role lacks `sqlgroup grant --operator_role`).
  //
  // The group's dead letters that match `filter`, oldest death first.
  absl::StatusOr<std::vector<DeadItem>> ListDead(const std::string& group,
                                                 const DeadFilter& filter = {});
  // One dead letter with its payload.
  absl::StatusOr<DeadItem> ShowDead(const std::string& group,
                                    const std::string& id);
  // Puts the selected dead letters back into the group with a fresh
  // attempt count, at `position` in their keys, and wakes its members; the
  // items are handed out again like any other (and may die again). With
  // `dry_run`, returns what it would do and changes nothing.
  absl::StatusOr<std::vector<RequeuedItem>> RequeueDead(
      const std::string& group, const DeadSelection& selection,
      RequeuePosition position = RequeuePosition::kOriginal,
      bool dry_run = false);
  // Deletes the selected dead letters for good (DeadItem without payload
  // nor error: id, key, died_at). `dry_run` as above.
  absl::StatusOr<std::vector<DeadItem>> PurgeDead(
      const std::string& group, const DeadSelection& selection,
      bool dry_run = false);
  // The group's waiting items that match `filter`, in key order.
  absl::StatusOr<std::vector<WaitingItem>> ListItems(
      const std::string& group, const ItemFilter& filter = {});
  // One waiting item with its whole payload.
  absl::StatusOr<WaitingItem> ShowItem(const std::string& group,
                                       const std::string& id);
  // Cancels the selected waiting items: each moves to the dead letters
  // with the last error "cancelled by ROLE" (RequeueDead undoes it), in
  // one transaction that is safe against members handing them out: an
  // item is then either acknowledged or cancelled, never both, never
  // lost. NOT_FOUND names ids that are not waiting (nothing changes);
  // FAILED_PRECONDITION on a schema before 18. `dry_run` as above.
  absl::StatusOr<std::vector<CancelledItem>> CancelItems(
      const std::string& group, const ItemSelection& selection,
      bool dry_run = false);
  // Pauses the group (`key` nullopt) or one key of it: no claim after the
  // commit returns its items (each claim reads the pauses); items a member
  // read before (at most a claim's batch per part) still go to handlers,
  // and items in a handler finish and are acknowledged. Stored in the
  // database, so it holds through restarts, rebalances and part-count
  // changes. False when it was paused already.
  absl::StatusOr<bool> PauseGroup(const std::string& group,
                                  const std::optional<std::string>& key = {});
  // Ends that pause and wakes the members. Resuming the group leaves the
  // keys paused one by one paused. False when it was not paused.
  absl::StatusOr<bool> ResumeGroup(const std::string& group,
                                   const std::optional<std::string>& key = {});

  // Topics (schema 20, docs/TOPICS.md): the schema's owner's to change.
  // A topic's name follows a group's rules (INVALID_ARGUMENT);
  // ALREADY_EXISTS when taken. Items reach it through sqlgroup.publish.
  absl::Status CreateTopic(const std::string& name);
  // NOT_FOUND when there is no such topic; FAILED_PRECONDITION, deleting
  // nothing, while groups read it (each named).
  absl::Status DeleteTopic(const std::string& name);
  // Every topic by name, with the groups that read it (not counting their
  // items).
  absl::StatusOr<std::vector<TopicInfo>> ListTopics();
  // One topic, with each group's waiting items and the oldest one's age
  // (reads each group's items: O(items)). NOT_FOUND when missing.
  absl::StatusOr<TopicInfo> DescribeTopic(const std::string& name);
  // Subscribes the group to `topic` (nullopt: ends its subscription, and
  // the items it holds stay). It receives what is published after this
  // commits; publishes in flight finish first. False when nothing changed
  // (no subscription to end). NOT_FOUND (no such group or topic),
  // ALREADY_EXISTS (subscribed to it already), FAILED_PRECONDITION (it
  // reads another topic: a group reads one, so end that first).
  absl::StatusOr<bool> SetGroupTopic(const std::string& group,
                                     const std::optional<std::string>& topic);

 private:
  struct Impl;  // the connection; keeps pqxx out of this header
  explicit Admin(AdminOptions options);
  AdminOptions options_;
  std::unique_ptr<Impl> impl_;
};

// The newest schema version this library knows (kSchemaVersion of
// sqlgroup/version.h).
int SchemaVersionKnown();

}  // namespace sqlgroup

#endif  // SQLGROUP_ADMIN_H_
