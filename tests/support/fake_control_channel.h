// A ControlChannel for unit tests of the member loop: a connection that is
// open unless the test says it is down, no LISTEN (the loop polls), and
// waits that end at their deadline or when the loop is woken.
#ifndef SQLGROUP_TESTS_SUPPORT_FAKE_CONTROL_CHANNEL_H_
#define SQLGROUP_TESTS_SUPPORT_FAKE_CONTROL_CHANNEL_H_

#include <algorithm>
#include <atomic>
#include <string>

#include "absl/time/clock.h"
#include "member/control_channel.h"
#include "wakeup.h"

namespace sqlgroup::testing {

class FakeControlChannel : public ControlChannel {
 public:
  explicit FakeControlChannel(const Wakeup& stop) : stop_(stop) {}

  // While down, Connect fails and the connection is closed.
  std::atomic<bool> down{false};
  std::atomic<int> connects{0};

  void SetSession(const std::string&) override {}
  void SetTtl(absl::Duration) override {}
  bool connected() const override { return connected_ && !down; }
  absl::Status Connect() override {
    if (down) return absl::UnavailableError("the database is down (fake)");
    connected_ = true;
    ++connects;
    return absl::OkStatus();
  }
  absl::Duration retry_delay() const override { return absl::Milliseconds(5); }
  void Disconnect(const absl::Status&) override { connected_ = false; }
  void StartListening() override {}
  absl::Status ListenForSession() override { return absl::OkStatus(); }
  void StopListeningForSession() override {}
  bool listening() const override { return false; }
  absl::StatusOr<bool> TakeBack(const KeepAlive&, bool) override {
    if (connected_ && down) {
      return absl::UnavailableError("the database is down (fake)");
    }
    return false;
  }
  absl::StatusOr<bool> WaitForWork(
      absl::Time until, const KeepAlive& keep_alive, bool may_replace,
      const std::function<bool()>& woken) override {
    while (!woken() && absl::Now() < until) {
      stop_.WaitFor(std::min(absl::Milliseconds(2), until - absl::Now()));
    }
    return TakeBack(keep_alive, may_replace);
  }
  void LendForDrain(absl::Duration timeout) override {
    absl::SleepFor(timeout);
  }

 private:
  const Wakeup& stop_;
  std::atomic<bool> connected_{false};
};

}  // namespace sqlgroup::testing

#endif  // SQLGROUP_TESTS_SUPPORT_FAKE_CONTROL_CHANNEL_H_
