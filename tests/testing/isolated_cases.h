// Runs the cases of a fuzz test in child processes, so that one run reports every kind of
// failure: a case that kills its child (a failed check, an ASan or UBSan report, a signal) or
// outlives `hang_seconds` is recorded with the end of the child's stderr, and a new child goes on
// from the next case. Call it from a single-threaded test (it forks).
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kelvin::testing {

struct IsolatedRun {
  struct Kind {
    int count = 0;
    std::string first;  // the first case's description and details
  };
  std::map<std::string, Kind> failures;  // by kind
  std::map<std::string, int> counts;     // of the "#name" reports, by name
  int cases = 0;
  double slowest_seconds = 0;
  int slowest_case = -1;
};

// report(kind, detail) from inside a case: what it finds wrong itself. An empty kind is a note of
// where it is, added to a crash's description; a kind "#name" is a count of events, not a failure.
using Report = std::function<void(const std::string& kind, const std::string& detail)>;

namespace isolated_internal {

inline void WriteAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n <= 0) return;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

// Records on the child's pipe: "B <case>\n" (begins), "D <case> <seconds>\n" (done),
// "P <kind bytes> <detail bytes>\n<kind><detail>" (a problem), "E\n" (every case done).
[[noreturn]] inline void RunChild(int out, int first, int count,
                                  const std::function<void(int, const Report&)>& run) {
  for (int i = first; i < count; ++i) {
    WriteAll(out, absl::StrCat("B ", i, "\n"));
    const auto started = std::chrono::steady_clock::now();
    run(i, [out](const std::string& kind, const std::string& detail) {
      WriteAll(out, absl::StrCat("P ", kind.size(), " ", detail.size(), "\n", kind, detail));
    });
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    WriteAll(out, absl::StrCat("D ", i, " ", seconds, "\n"));
  }
  WriteAll(out, "E\n");
  ::_exit(0);  // no atexit handlers, gtest's or LeakSanitizer's, in the child
}

// The kind of a child's death, from the end of its stderr.
inline std::string DeathKind(const std::string& stderr_tail, int status) {
  for (const char* marker : {"Kelvin check failed", "runtime error:", "ERROR: AddressSanitizer",
                             "ERROR: LeakSanitizer", "terminate called"}) {
    const size_t at = stderr_tail.find(marker);
    if (at == std::string::npos) continue;
    const size_t line = stderr_tail.rfind('\n', at);
    const size_t begin = marker[0] == 'E' ? at : line == std::string::npos ? 0 : line + 1;
    std::string text = stderr_tail.substr(begin, stderr_tail.find('\n', at) - begin);
    // The kind is the place (Kelvin's check line "[F r? 12:00:00.000 file.cc:11] Kelvin check
    // failed on rank ? at path:11: condition message", UBSan's "file.cc:1:2: runtime error: ...")
    // and the message with its numbers as N, so that other values are the same kind.
    if (const size_t place = text.find(" at "); marker[0] == 'K' && place != std::string::npos) {
      text = text.substr(place + 4);
    } else if (marker[0] == 'E') {
      text = text.substr(0, text.find(" on "));  // ASan's error, without the address
    }
    const size_t message = std::min(text.find(": "), text.size());
    std::string kind = text.substr(0, message);
    for (size_t i = message; i < text.size() && kind.size() < 240; ++i) {
      if (text[i] < '0' || text[i] > '9') {
        kind += text[i];
      } else if (kind.empty() || kind.back() != 'N') {
        kind += 'N';
      }
    }
    text = kind;
    return absl::StrCat("the child died: ", text.substr(0, 240));
  }
  if (WIFSIGNALED(status)) return absl::StrCat("the child died: signal ", WTERMSIG(status));
  return absl::StrCat("the child died: exit status ", WEXITSTATUS(status));
}

}  // namespace isolated_internal

// Runs cases 0 .. count - 1; each child runs them in order, announcing each to the parent.
inline IsolatedRun RunIsolated(int count, const std::function<std::string(int)>& describe,
                               const std::function<void(int, const Report&)>& run,
                               double slow_seconds, double hang_seconds) {
  using Clock = std::chrono::steady_clock;
  IsolatedRun result;
  result.cases = count;
  std::string note;  // the running case's latest
  const auto add = [&](int i, const std::string& kind, const std::string& more) {
    IsolatedRun::Kind& k = result.failures[kind];
    if (k.count++ == 0) k.first = absl::StrCat("case ", i, ": ", describe(i), note, more);
  };
  int next = 0;
  while (next < count) {
    int records[2], errors[2];
    if (::pipe(records) != 0 || ::pipe(errors) != 0) {
      add(next, "pipe() failed", "");
      return result;
    }
    std::fflush(nullptr);
    const pid_t child = ::fork();
    if (child < 0) {
      add(next, "fork() failed", "");
      return result;
    }
    if (child == 0) {
      ::close(records[0]);
      ::close(errors[0]);
      ::dup2(errors[1], STDERR_FILENO);
      ::dup2(errors[1], STDOUT_FILENO);
      isolated_internal::RunChild(records[1], next, count, run);
    }
    ::close(records[1]);
    ::close(errors[1]);
    std::string pending, tail;
    int running = -1;
    bool finished = false, killed = false;
    Clock::time_point began = Clock::now();
    pollfd fds[2] = {{records[0], POLLIN, 0}, {errors[0], POLLIN, 0}};
    int open_pipes = 2;
    while (open_pipes > 0) {
      ::poll(fds, 2, 100);
      for (pollfd& fd : fds) {
        if (fd.fd < 0 || (fd.revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        char buffer[65536];
        const ssize_t n = ::read(fd.fd, buffer, sizeof(buffer));
        if (n <= 0) {
          ::close(fd.fd);
          fd.fd = -1;
          --open_pipes;
        } else if (fd.fd == errors[0]) {
          tail.append(buffer, static_cast<size_t>(n));
          if (tail.size() > 8192) tail.erase(0, tail.size() - 8192);
        } else {
          pending.append(buffer, static_cast<size_t>(n));
        }
      }
      // Parse the complete records.
      while (true) {
        const size_t newline = pending.find('\n');
        if (newline == std::string::npos) break;
        const std::string head = pending.substr(0, newline);
        if (head[0] == 'P') {
          size_t kind_bytes = 0, detail_bytes = 0;
          const size_t space = head.find(' ', 2);
          if (!absl::SimpleAtoi(head.substr(2, space - 2), &kind_bytes) ||
              !absl::SimpleAtoi(head.substr(space + 1), &detail_bytes)) {
            break;
          }
          if (pending.size() < newline + 1 + kind_bytes + detail_bytes) break;
          const std::string detail = pending.substr(newline + 1 + kind_bytes, detail_bytes);
          if (kind_bytes == 0) {
            note = absl::StrCat(" ", detail);
          } else if (pending[newline + 1] == '#') {
            ++result.counts[pending.substr(newline + 2, kind_bytes - 1)];
          } else {
            add(running, pending.substr(newline + 1, kind_bytes), absl::StrCat("\n  ", detail));
          }
          pending.erase(0, newline + 1 + kind_bytes + detail_bytes);
          continue;
        }
        if (head[0] == 'B') {
          absl::SimpleAtoi(head.substr(2), &running);
          began = Clock::now();
          note.clear();
        } else if (head[0] == 'D') {
          double seconds = 0;
          absl::SimpleAtod(head.substr(head.rfind(' ') + 1), &seconds);
          if (seconds > result.slowest_seconds) {
            result.slowest_seconds = seconds;
            result.slowest_case = running;
          }
          if (seconds > slow_seconds) {
            add(running, absl::StrCat("a case taking more than ", slow_seconds, " s"),
                absl::StrCat(" (", seconds, " s)"));
          }
          running = -1;
        } else if (head[0] == 'E') {
          finished = true;
        }
        pending.erase(0, newline + 1);
      }
      if (running >= 0 && !killed &&
          std::chrono::duration<double>(Clock::now() - began).count() > hang_seconds) {
        ::kill(child, SIGKILL);
        killed = true;
      }
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    if (finished && WIFEXITED(status) && WEXITSTATUS(status) == 0) break;
    if (running < 0) {  // died between cases
      add(next, isolated_internal::DeathKind(tail, status), "\n" + tail);
      break;
    }
    if (killed) {
      add(running, absl::StrCat("a case running for more than ", hang_seconds, " s (killed)"), "");
    } else {
      add(running, isolated_internal::DeathKind(tail, status), "\n" + tail);
    }
    next = running + 1;
  }
  return result;
}

}  // namespace kelvin::testing
