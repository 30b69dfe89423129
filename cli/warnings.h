#ifndef FULCRUM_CLI_WARNINGS_H_
#define FULCRUM_CLI_WARNINGS_H_

#include <ostream>

namespace fulcrum {

// Where a command writes its warnings (an index entry skipped, profile entries unused). They reach stderr only
// when the command succeeds: a run that fails prints one line, its error.
std::ostream& warnings();

// Writes the warnings held so far to stderr.
void flush_warnings();

}  // namespace fulcrum

#endif  // FULCRUM_CLI_WARNINGS_H_
