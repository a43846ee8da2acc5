// Every metric family a member registers: name, help and labels, in one
// place (docs/METRICS.md lists them). Internal to metrics.cc.
#ifndef SQLGROUP_METRICS_FAMILIES_H_
#define SQLGROUP_METRICS_FAMILIES_H_

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <map>
#include <string>

#include "metrics.h"

namespace sqlgroup {

struct MemberMetrics::Families {
  using Counter = prometheus::Counter;
  template <typename T>
  using Family = prometheus::Family<T>;
  using Gauge = prometheus::Gauge;
  using Histogram = prometheus::Histogram;

  explicit Families(prometheus::Registry& r)
      : build_info(prometheus::BuildGauge()
                       .Name("sqlgroup_build_info")
                       .Help("1, labelled with this process's sqlgroup "
                             "release, the newest schema it knows and the "
                             "oldest it runs against (docs/UPGRADING.md)")
                       .Register(r)),
        members(prometheus::BuildGauge()
                    .Name("sqlgroup_group_members")
                    .Help("Live sessions in the group, as this member last "
                          "read them")
                    .Register(r)),
        group_parts(prometheus::BuildGauge()
                        .Name("sqlgroup_group_parts")
                        .Help("The group's part count, as this member last "
                              "read it (group alter --parts changes it live)")
                        .Register(r)),
        owned_parts(prometheus::BuildGauge()
                        .Name("sqlgroup_owned_parts")
                        .Help("Parts this member owns now")
                        .Register(r)),
        part_owner(prometheus::BuildGauge()
                       .Name("sqlgroup_part_owner")
                       .Help("1 for the member that owns the part now "
                             "(labels part, member, session)")
                       .Register(r)),
        lag_items(prometheus::BuildGauge()
                      .Name("sqlgroup_part_lag_items")
                      .Help("Items in the part not yet acknowledged, "
                            "reported by its owner; exact up to a cap of "
                            "100..1000 per part, estimated from a sample of "
                            "the table's pages above it")
                      .Register(r)),
        lag_age(prometheus::BuildGauge()
                    .Name("sqlgroup_part_oldest_item_age_seconds")
                    .Help("Age of the part's oldest waiting item, reported "
                          "by its owner")
                    .Register(r)),
        blocked_keys(prometheus::BuildGauge()
                         .Name("sqlgroup_part_blocked_keys")
                         .Help("Keys of the part blocked behind a retry "
                               "(their head failed and is not due yet, so "
                               "their later items wait), reported by its "
                               "owner; exact up to 100..1000 failed items "
                               "per part, a lower bound above; 0 under "
                               "ordering 'none'")
                         .Register(r)),
        blocked_age(prometheus::BuildGauge()
                        .Name("sqlgroup_part_oldest_blocked_seconds")
                        .Help("Age since enqueue of the part's oldest head "
                              "blocked behind a retry, reported by its "
                              "owner; 0 when no key is blocked")
                        .Register(r)),
        dead_items(prometheus::BuildGauge()
                       .Name("sqlgroup_dead_items")
                       .Help("The group's dead letters, reported by the "
                             "member that reports the group (the first "
                             "live one, in lexical order of session)")
                       .Register(r)),
        dead_age(prometheus::BuildGauge()
                     .Name("sqlgroup_oldest_dead_item_age_seconds")
                     .Help("Age of the group's oldest dead letter since it "
                           "died (database clock), reported by one member "
                           "as sqlgroup_dead_items; 0 when there is none")
                     .Register(r)),
        group_paused(prometheus::BuildGauge()
                         .Name("sqlgroup_group_paused")
                         .Help("1 while the whole group is paused (`sqlgroup "
                               "group pause`), reported by one member as "
                               "sqlgroup_dead_items")
                         .Register(r)),
        paused_keys(prometheus::BuildGauge()
                        .Name("sqlgroup_paused_keys")
                        .Help("Keys of the group paused one by one (`group "
                              "pause --key`) or held behind a dead letter "
                              "(on_dead hold), reported by one member as "
                              "sqlgroup_dead_items")
                        .Register(r)),
        group_topic(prometheus::BuildGauge()
                        .Name("sqlgroup_group_topic")
                        .Help("1: the group reads the topic of the label "
                              "(`group create/alter --topic`), reported by "
                              "one member as sqlgroup_dead_items; join it "
                              "on group to see lag by topic")
                        .Register(r)),
        topic_published(prometheus::BuildGauge()
                            .Name("sqlgroup_topic_published_items")
                            .Help("Items published to the group's topic "
                                  "so far (a running total: rate() it), "
                                  "publishes that rolled back included; "
                                  "reported by one member of each group "
                                  "that reads it")
                            .Register(r)),
        dead_expired(prometheus::BuildCounter()
                         .Name("sqlgroup_dead_items_expired_total")
                         .Help("Dead letters this member removed because "
                               "they outlived the group's dead_retention")
                         .Register(r)),
        items(prometheus::BuildCounter()
                  .Name("sqlgroup_items_total")
                  .Help("Items by outcome: claimed, acked, failed (handler "
                        "failures), retried, dead_lettered, lost_claim "
                        "(acks refused by the fence), conflict (released "
                        "after a serialization failure, deadlock or lock "
                        "timeout)")
                  .Register(r)),
        rebalances(prometheus::BuildCounter()
                       .Name("sqlgroup_rebalances_total")
                       .Help("Changes of this member's target parts, by "
                             "reason: join, leave, expiry, lost, return (a "
                             "static member back in its place), parts (the "
                             "group's part count changed)")
                       .Register(r)),
        parts_taken(prometheus::BuildCounter()
                        .Name("sqlgroup_parts_taken_total")
                        .Help("Parts this member took, by the reason of the "
                              "change of target that moved them: join, "
                              "leave, expiry, lost, return (a static member "
                              "taking back its parts after a restart), parts "
                              "(a change of the part count; each "
                              "take pauses the part; a sticky assignor "
                              "takes only what balance needs)")
                        .Register(r)),
        static_away(prometheus::BuildGauge()
                        .Name("sqlgroup_static_members_away")
                        .Help("Static members that stopped and keep their "
                              "place and parts until their static timeout, "
                              "as this member last read the group")
                        .Register(r)),
        static_away_until(
            prometheus::BuildGauge()
                .Name("sqlgroup_static_member_away_until_seconds")
                .Help("When an away static member's parts move to the "
                      "others unless it is back (Unix time, database "
                      "clock; label static_member is its instance)")
                .Register(r)),
        rebalance_seconds(prometheus::BuildHistogram()
                              .Name("sqlgroup_rebalance_duration_seconds")
                              .Help("From a change of target until this "
                                    "member owned exactly its target parts")
                              .Register(r)),
        parts_revoking(prometheus::BuildGauge()
                           .Name("sqlgroup_parts_revoking")
                           .Help("Parts this member is handing over (a "
                                 "rebalance or a stop) and still runs "
                                 "handler calls on: the part moves only "
                                 "once they have all returned")
                           .Register(r)),
        handover_wait_seconds(
            prometheus::BuildHistogram()
                .Name("sqlgroup_handover_wait_seconds")
                .Help("From the revoke of a part until its last handler "
                      "call returned and the part was released")
                .Register(r)),
        cutoffs(prometheus::BuildCounter()
                    .Name("sqlgroup_handler_cutoffs_total")
                    .Help("Parts whose handler calls were still running "
                          "drain_timeout after their revoke and were cut "
                          "off (each call's item retried, its attempt "
                          "counted)")
                    .Register(r)),
        circuit_open(prometheus::BuildGauge()
                         .Name("sqlgroup_circuit_open")
                         .Help("1 while this member's handler fails every "
                               "item (an outage of what it calls) and the "
                               "member hands it only a probe now and then "
                               "(circuit breaker open); 0 otherwise")
                         .Register(r)),
        circuit_trips(prometheus::BuildCounter()
                          .Name("sqlgroup_circuit_trips_total")
                          .Help("Times this member's circuit breaker opened: "
                                "outages of what its handler calls")
                          .Register(r)),
        heartbeat_seconds(prometheus::BuildHistogram()
                              .Name("sqlgroup_heartbeat_seconds")
                              .Help("Heartbeat round trip")
                              .Register(r)),
        sessions_lost(prometheus::BuildCounter()
                          .Name("sqlgroup_sessions_lost_total")
                          .Help("Sessions this member lost (expired or "
                                "reaped) and replaced")
                          .Register(r)),
        claim_seconds(prometheus::BuildHistogram()
                          .Name("sqlgroup_claim_seconds")
                          .Help("Latency of one claim query (of a claim "
                                "sent with a batch's ack: of that statement)")
                          .Register(r)),
        carried_claims(
            prometheus::BuildCounter()
                .Name("sqlgroup_carried_claims_total")
                .Help("Claims sent with the previous batch's ack, in one "
                      "statement (a batch handler that wrote nothing, while "
                      "no other part waited for a worker)")
                .Register(r)),
        connections(prometheus::BuildGauge()
                        .Name("sqlgroup_connections")
                        .Help("Database connections this member holds now, "
                              "by kind: control (one while it runs; lent to "
                              "its workers between rounds), worker (opened "
                              "while parts have work, closed when idle), "
                              "listen (to --listen_dsn)")
                        .Register(r)),
        connection_budget(
            prometheus::BuildGauge()
                .Name("sqlgroup_connection_budget")
                .Help("The most connections this member's process holds "
                      "to --dsn at once (--max_connections, shared by "
                      "--members)")
                .Register(r)),
        connections_refused(
            prometheus::BuildCounter()
                .Name("sqlgroup_connections_refused_total")
                .Help("Connection attempts the server refused for now "
                      "(SQLSTATE 53300 too many clients, 57P03 starting or "
                      "stopping, a full PgBouncer): waited out with backoff")
                .Register(r)),
        borrowed_tasks(
            prometheus::BuildCounter()
                .Name("sqlgroup_borrowed_tasks_total")
                .Help("Worker tasks run on the member's control connection, "
                      "borrowed between the control thread's rounds, for "
                      "want of a connection of their own")
                .Register(r)),
        ack_seconds(prometheus::BuildHistogram()
                        .Name("sqlgroup_ack_seconds")
                        .Help("Latency of the fenced delete and commit of "
                              "one acknowledging transaction (with the "
                              "next claim, when it carries one; with a SQL "
                              "function handler, the statement that calls "
                              "it, the function's time included)")
                        .Register(r)) {}

  Family<Gauge>& build_info;
  Family<Gauge>& members;
  Family<Gauge>& group_parts;
  Family<Gauge>& owned_parts;
  Family<Gauge>& part_owner;
  Family<Gauge>& lag_items;
  Family<Gauge>& lag_age;
  Family<Gauge>& blocked_keys;
  Family<Gauge>& blocked_age;
  Family<Gauge>& dead_items;
  Family<Gauge>& dead_age;
  Family<Gauge>& group_paused;
  Family<Gauge>& paused_keys;
  Family<Gauge>& group_topic;
  Family<Gauge>& topic_published;
  Family<Counter>& dead_expired;
  Family<Counter>& items;
  Family<Counter>& rebalances;
  Family<Counter>& parts_taken;
  Family<Gauge>& static_away;
  Family<Gauge>& static_away_until;
  Family<Histogram>& rebalance_seconds;
  Family<Gauge>& parts_revoking;
  Family<Histogram>& handover_wait_seconds;
  Family<Counter>& cutoffs;
  Family<Gauge>& circuit_open;
  Family<Counter>& circuit_trips;
  Family<Histogram>& heartbeat_seconds;
  Family<Counter>& sessions_lost;
  Family<Histogram>& claim_seconds;
  Family<Counter>& carried_claims;
  Family<Gauge>& connections;
  Family<Gauge>& connection_budget;
  Family<Counter>& connections_refused;
  Family<Counter>& borrowed_tasks;
  Family<Histogram>& ack_seconds;

  // Fixed series, labelled group and instance.
  Gauge* members_gauge = nullptr;
  Gauge* parts_gauge = nullptr;
  Gauge* away_gauge = nullptr;
  Counter* claimed = nullptr;
  Counter* acked = nullptr;
  Counter* failed = nullptr;
  Counter* retried = nullptr;
  Counter* dead = nullptr;
  Counter* lost = nullptr;
  Counter* conflict = nullptr;
  Counter* sessions_lost_counter = nullptr;
  Histogram* rebalance = nullptr;
  Gauge* revoking = nullptr;
  Histogram* handover = nullptr;
  Counter* cutoff = nullptr;
  Gauge* circuit = nullptr;
  Counter* trips = nullptr;
  Histogram* heartbeat = nullptr;
  Histogram* claim = nullptr;
  Counter* carried = nullptr;
  Histogram* ack = nullptr;
  std::map<std::string, Gauge*> connections_by_kind;
  Gauge* budget = nullptr;
  Counter* refused = nullptr;
  Counter* borrowed = nullptr;
  Counter* expired = nullptr;
};

}  // namespace sqlgroup

#endif  // SQLGROUP_METRICS_FAMILIES_H_
