#pragma once
/// The one exception optgen's runtime throws. Its message always says three things: which call
/// failed (a CUDA driver or NVRTC function, or an optgen API function), the error it reported, and
/// what the user can do about it.

#include <stdexcept>
#include <string>

namespace optgen {

class Error : public std::runtime_error {
 public:
  /// `call`: what failed, e.g. "cuModuleLoadData" or "AdamW::add_param_group";
  /// `error`: what went wrong; `fix`: what to do (may be empty when there is nothing to add).
  Error(std::string call, std::string error, std::string fix = "");

  const std::string& call() const { return call_; }
  const std::string& error() const { return error_; }
  const std::string& fix() const { return fix_; }

 private:
  std::string call_, error_, fix_;
};

}  // namespace optgen
