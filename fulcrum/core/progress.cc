#include "fulcrum/core/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace fulcrum {

Progress::Progress(std::string label, int64_t total, bool enabled)
    : label_(std::move(label)), total_(total), shown_(enabled && total > 0 && isatty(STDERR_FILENO) == 1) {}

Progress::~Progress() { finish(); }

void Progress::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!shown_) return;
  shown_ = false;
  std::fputs("\r\033[K", stderr);  // clear the line
  std::fflush(stderr);
}

void Progress::advance(int64_t done) {
  const int64_t now = done_.fetch_add(done) + done;
  if (shown_) draw(now);
}

void Progress::draw(int64_t done) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!shown_) return;
  const auto now = std::chrono::steady_clock::now();
  if (done < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * done / total_);
  std::fputs(fmt::format("\r{} [{}{}] {}/{}", label_, std::string(filled, '#'), std::string(kWidth - filled, ' '),
                         done, total_).c_str(), stderr);
  std::fflush(stderr);
}

}  // namespace fulcrum
