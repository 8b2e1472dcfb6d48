#include "encore/error.h"

namespace encore {

void throw_error(absl::StatusCode code, std::string message) {
  throw Error(absl::Status(code, message));
}

}  // namespace encore
