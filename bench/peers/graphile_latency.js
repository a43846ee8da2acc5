// graphile-worker side of bench/peers/graphile_bench.py (which installs
// graphile-worker and pg and sets NODE_PATH to them): one worker pool in
// library mode with one task, `lat`, that only notes when it started.
//
// Latency mode (default): a job whose payload has m=true is a measured one;
// its task records the wall clock in unix microseconds with the payload's
// enqueue clock (text, from the database) and when the last NOTIFY was
// heard (the job's own when nothing else is enqueued). All kept in memory,
// so that nothing but clock reads sits on the hot path. After --items
// measured jobs the records are written to --out as JSON and the pool
// stops. Other jobs (background load) are only counted.
//
// Drain mode (--drain N): every task is a no-op; after N jobs have been
// completed (written back to the database) the time from the first task's
// start to that point goes to --out, for graphile's throughput.
//
// "ready" is printed once the pool has its LISTEN connection.
//
// Usage: NODE_PATH=.../node_modules node graphile_latency.js
//   --connection postgres://... --out FILE [--concurrency 4] [--items 300]
//   [--drain N] [--local_queue N] [--complete_delay MS]
"use strict";
const fs = require("fs");
const { EventEmitter } = require("events");
const { performance } = require("perf_hooks");
const { run, Logger } = require("graphile-worker");

const args = { concurrency: 4, items: 300, drain: 0, local_queue: 0,
               complete_delay: -1 };
for (let i = 2; i < process.argv.length; i += 2) {
  args[process.argv[i].replace(/^--/, "")] = process.argv[i + 1];
}
const concurrency = Number(args.concurrency);
const items = Number(args.items);
const drain = Number(args.drain);

// Sub-millisecond wall clock: the monotonic clock offset by the wall clock at
// process start, comparable with clock_timestamp() on this machine.
const nowUs = () => Math.round((performance.timeOrigin + performance.now()) * 1000);

// graphile logs each completed job at info level by default; a synchronous
// write per job to a pipe would be measured along with the pickup.
const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") console.error(message);
});

const records = [];
let load = 0;
let notifications = 0;
let heardUs = 0;
let firstUs = 0;
let completed = 0;
let runner = null;
let finished = false;

async function finish(extra) {
  if (finished) return;
  finished = true;
  fs.writeFileSync(args.out, JSON.stringify({
    version: require("graphile-worker/package.json").version,
    concurrency, notifications, load, records, ...extra,
  }));
  if (runner) await runner.stop();
  process.exit(0);
}

const events = new EventEmitter();
events.on("pool:listen:success", () => console.log("ready"));
events.on("pool:listen:notification", () => {
  heardUs = nowUs();
  notifications++;
});
if (drain > 0) {
  events.on("job:complete", () => {
    if (++completed === drain) {
      finish({ drained: completed, first_us: firstUs, last_us: nowUs() });
    }
  });
}

const taskList = {
  lat: async (payload) => {
    const at = nowUs();  // first thing: this is "task start"
    if (drain > 0) {
      if (!firstUs) firstUs = at;
    } else if (payload.m) {
      records.push([at, payload.t, heardUs]);
      if (records.length === items) setImmediate(finish);
    } else {
      load++;
    }
  },
};

process.on("SIGTERM", () => finish({ interrupted: true }));

// --local_queue N (> 1): graphile's batched mode, the pool fetching and
// locking N jobs at a time; --complete_delay MS (>= 0): completions
// batched over that long (its completeJobBatchDelay).
const worker = {};
if (Number(args.local_queue) > 1) {
  worker.localQueue = { size: Number(args.local_queue) };
}
if (Number(args.complete_delay) >= 0) {
  worker.completeJobBatchDelay = Number(args.complete_delay);
}

run({
  connectionString: args.connection,
  concurrency,
  taskList,
  logger,
  events,
  noHandleSignals: true,
  preset: { worker },
}).then((r) => { runner = r; }, (e) => {
  console.error(e);
  process.exit(1);
});
