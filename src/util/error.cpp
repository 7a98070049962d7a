#include "fusesim/util/error.hpp"

namespace fusesim {

InputError::InputError(std::string file, std::string json_path, std::string message)
    : std::runtime_error(file + ": " + json_path + ": " + message),
      file_(std::move(file)),
      json_path_(std::move(json_path)),
      message_(std::move(message)) {}

}  // namespace fusesim
