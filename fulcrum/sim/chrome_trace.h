#ifndef FULCRUM_SIM_CHROME_TRACE_H_
#define FULCRUM_SIM_CHROME_TRACE_H_

#include <string>

#include "fulcrum/sim/simulator.h"

namespace fulcrum {

// The timeline of a simulation as Chrome trace event JSON (opens in Perfetto and chrome://tracing): one
// process per pipeline rank of the traced replica, with a thread per stream (compute, point-to-point,
// data-parallel collectives) and a counter of the rank's memory. Times in microseconds.
std::string chrome_trace(const SimResult& result, const std::string& title);

}  // namespace fulcrum

#endif  // FULCRUM_SIM_CHROME_TRACE_H_
