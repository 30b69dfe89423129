#ifndef FULCRUM_CORE_ERROR_H_
#define FULCRUM_CORE_ERROR_H_

#include <stdexcept>
#include <string>

namespace fulcrum {

// Bad input from the user: a malformed file, an impossible parameter. The message is one line that names the
// file and the record where there is one; the command line prints it and exits with status 2.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An InputError about one sample, whose message already names the sample's file and record (Dataset::
// describe_sample): a caller that names the dataset as a whole leaves it as it is.
class SampleError : public InputError {
 public:
  using InputError::InputError;
};

// A fault of Fulcrum's own, found by a check on something it made from inputs that passed theirs (a planned
// schedule that fails validation). The command line prints it as an internal error and exits with status 3, so
// that a script can tell it from bad input.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

}  // namespace fulcrum

#endif  // FULCRUM_CORE_ERROR_H_
