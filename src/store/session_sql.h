// SQL shared by the statements on sessions (member_store.cc) and on the
// parts they own (part_ownership.cc). Internal to store/.
#ifndef SQLGROUP_STORE_SESSION_SQL_H_
#define SQLGROUP_STORE_SESSION_SQL_H_

namespace sqlgroup::store {

// A session is alive while heartbeated_at > clock_timestamp() - its
// group's TTL, or, a static member that stopped, until its away_until
// (schema 8). The same predicate guards heartbeats, takes and acks. The
// coalesce matters: away_until is NULL for every other session, and
// NOT (false OR NULL) is NULL, which would never reap it.
inline constexpr char kAlive[] =
    "(s.heartbeated_at > clock_timestamp() - g.session_ttl "
    "OR coalesce(s.away_until, '-infinity') > clock_timestamp())";

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_SESSION_SQL_H_
