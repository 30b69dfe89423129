#include "cli/warnings.h"

#include <iostream>
#include <sstream>

namespace fulcrum {
namespace {

std::ostringstream& held() {
  static std::ostringstream stream;
  return stream;
}

}  // namespace

std::ostream& warnings() { return held(); }

void flush_warnings() {
  std::cerr << held().str() << std::flush;
  held().str("");
}

}  // namespace fulcrum
