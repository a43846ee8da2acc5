-- sqlgroup schema version 21: a keyed enqueue keeps the plan of its look
-- for the key's newest item (issue 43).
-- members-from: 17
--
-- sqlgroup.block_next_time, which enqueue and enqueue_many call for each
-- keyed item, reads the newest item of the key's block (its id's time
-- bounds the new one's). PL/pgSQL planned that query again at every call
-- while the group's items were few: the custom plan, its bounds folded
-- from the key, always looked cheaper than the generic one, whose bounds
-- are parameters, so the plan cache never settled on one. Both read the
-- same stretch of the primary key, backwards, and stop at the first row.
-- On an idle group the planning was a third of a single enqueue: 1.5 ms
-- of server time per sqlgroup.enqueue became 1.0 ms in
-- bench/latency_bench.py (its items' enqueue commits and reaches a member
-- that much sooner), and pgbench's single keyed enqueues ran 1.27 ms
-- against 0.81 (session 33, bench/RESULTS.md).
--
-- Expand only: members never call it.
--
-- A later CREATE OR REPLACE of block_next_time drops the setting unless it
-- says SET plan_cache_mode = force_generic_plan again (enqueue_function_test
-- reads the plans and fails without it).

ALTER FUNCTION sqlgroup.block_next_time(text, bigint)
  SET plan_cache_mode = force_generic_plan;
