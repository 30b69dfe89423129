#ifndef FULCRUM_CORE_INPUT_FILES_H_
#define FULCRUM_CORE_INPUT_FILES_H_

#include <string>

namespace fulcrum {

// The files this process has read as input, by their resolved paths, so that no output of the run is written
// over one of them. Safe to call from several threads.
void note_input_file(const std::string& path);

// Whether `path` resolves to a file noted as an input.
bool is_input_file(const std::string& path);

}  // namespace fulcrum

#endif  // FULCRUM_CORE_INPUT_FILES_H_
