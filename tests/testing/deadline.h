// A watchdog for tests that must not hang: while a Deadline lives, a thread watches it; when
// `limit` passes first, it prints what was running and aborts the test program (a hung call
// cannot be failed from its own thread). Set() names the case in progress; Restart() also gives
// it a fresh `limit` (a deadline per case). An abort meanwhile (a failed check; ASan and UBSan
// reports end in one under abort_on_error / halt_on_error) prints the case too.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace kelvin::testing {

class Deadline {
 public:
  Deadline(std::chrono::seconds limit, std::string what)
      : limit_(limit),
        expires_(std::chrono::steady_clock::now() + limit),
        what_(std::move(what)),
        watcher_([this] { Watch(); }) {
    Name("(none yet)");
    struct sigaction action = {};
    action.sa_handler = OnAbort;
    action.sa_flags = SA_RESETHAND;  // the default action when re-raised
    sigaction(SIGABRT, &action, &previous_);
  }
  ~Deadline() {
    sigaction(SIGABRT, &previous_, nullptr);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    woken_.notify_one();
    watcher_.join();
  }
  Deadline(const Deadline&) = delete;
  Deadline& operator=(const Deadline&) = delete;

  // The case now running, printed if the deadline passes.
  void Set(std::string current) {
    std::lock_guard<std::mutex> lock(mutex_);
    Name(current);
    current_ = std::move(current);
  }
  void Restart(std::string current) {
    std::lock_guard<std::mutex> lock(mutex_);
    Name(current);
    current_ = std::move(current);
    expires_ = std::chrono::steady_clock::now() + limit_;
  }

 private:
  static constexpr size_t kNameBytes = 4096;
  // The case's name where a signal handler can read it (it may not lock or allocate).
  static char* AbortName() {
    static char name[kNameBytes] = {};
    return name;
  }
  static void Name(const std::string& current) {
    const size_t n = std::min(current.size(), kNameBytes - 2);
    std::copy_n(current.data(), n, AbortName());
    AbortName()[n] = '\n';
    AbortName()[n + 1] = '\0';
  }
  static void OnAbort(int signal) {
    constexpr char kPrefix[] = "\nFAILED: the test program aborted; the case running: ";
    ssize_t ignored = ::write(STDERR_FILENO, kPrefix, sizeof(kPrefix) - 1);
    const char* name = AbortName();
    size_t length = 0;
    while (length < kNameBytes && name[length] != '\0') ++length;
    ignored = ::write(STDERR_FILENO, name, length);
    (void)ignored;
    ::raise(signal);  // SA_RESETHAND: the default action now
  }

  void Watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!done_) {
      const std::chrono::steady_clock::time_point until = expires_;
      // Woken by the destructor, or at `until`: a Restart() since then moved the deadline on.
      woken_.wait_until(lock, until, [&] { return done_; });
      if (done_ || expires_ != until) continue;
      if (std::chrono::steady_clock::now() >= until) break;
    }
    if (done_) return;
    std::fprintf(stderr, "FAILED: %s did not finish within %lld s; the case running: %s\n",
                 what_.c_str(), static_cast<long long>(limit_.count()), current_.c_str());
    std::fflush(stderr);
    std::abort();
  }

  std::mutex mutex_;
  std::condition_variable woken_;
  bool done_ = false;
  const std::chrono::seconds limit_;
  std::chrono::steady_clock::time_point expires_;
  std::string what_, current_ = "(none yet)";
  struct sigaction previous_ = {};
  std::thread watcher_;  // last: starts once the members above exist
};

}  // namespace kelvin::testing
