// What the settler asks of the connection a worker's task runs on
// (WorkerConnection), beyond the statements themselves (store::ItemAcks):
// an interface, so that the settler's unit tests run without a database.
//
// Thread safety: one worker thread.
#ifndef SQLGROUP_MEMBER_TASK_CONNECTION_H_
#define SQLGROUP_MEMBER_TASK_CONNECTION_H_

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace sqlgroup {

class TaskConnection {
 public:
  virtual ~TaskConnection() = default;
  // Drops the connection after `why` (a borrowed control connection only
  // when it broke: the control thread reconnects).
  virtual void Disconnect(const absl::Status& why) = 0;
  // Whether to cut a batch short: the control thread waits for the
  // connection this worker borrowed.
  virtual bool YieldControl() const = 0;
  // Whether there is a connection to run a statement on: false after it
  // broke and was dropped, until the next task acquires one.
  virtual bool Connected() const = 0;
  // The statement timeout a SQL function runs under on it now (half the
  // group's TTL).
  virtual absl::Duration FunctionTimeout() const = 0;
};

}  // namespace sqlgroup

#endif  // SQLGROUP_MEMBER_TASK_CONNECTION_H_
