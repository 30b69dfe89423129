#ifndef FULCRUM_CORE_PROGRESS_H_
#define FULCRUM_CORE_PROGRESS_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace fulcrum {

// A progress bar for long operations, on stderr and only when stderr is a terminal (never in pipes, files or
// tests); `enabled` false (--quiet) turns it off too. Safe to advance from several threads. Redraws at most
// ten times a second and clears its line when destroyed.
class Progress {
 public:
  Progress(std::string label, int64_t total, bool enabled = true);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void advance(int64_t done = 1);
  // Clears the bar's line now (before printing results), instead of at destruction.
  void finish();

 private:
  void draw(int64_t done);

  std::string label_;
  int64_t total_;
  std::atomic<bool> shown_;
  std::atomic<int64_t> done_{0};
  std::mutex mutex_;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace fulcrum

#endif  // FULCRUM_CORE_PROGRESS_H_
