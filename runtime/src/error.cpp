#include "optgen/error.h"

#include <utility>

namespace optgen {

namespace {

std::string message(const std::string& call, const std::string& error, const std::string& fix) {
  std::string text = call + " failed: " + error;
  if (!fix.empty()) text += "\n  fix: " + fix;
  return text;
}

}  // namespace

Error::Error(std::string call, std::string error, std::string fix)
    : std::runtime_error(message(call, error, fix)),
      call_(std::move(call)),
      error_(std::move(error)),
      fix_(std::move(fix)) {}

}  // namespace optgen
