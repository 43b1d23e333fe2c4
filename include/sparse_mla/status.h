// Status: the error type every public entry point returns.
// No exceptions cross the API: a call either returns Status::ok() or a Status whose message
// names the offending argument and its value, e.g.
//   "sparse_prefill: q.sizes[1] (h_q) = 129 is out of range [1, 128]".
// Outputs are never touched when validation fails.
#pragma once

#include <string>
#include <utility>

namespace sparse_mla {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // shape, dtype, stride, alignment, range of an argument
  kUnsupported,      // valid input that no kernel of the chosen back end can run
  kDeviceError,      // CUDA runtime error (launch failure, out of memory, ...)
  kInternal,         // a broken invariant inside the library
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string message) {
  return {StatusCode::kInvalidArgument, std::move(message)};
}
inline Status unsupported(std::string message) {
  return {StatusCode::kUnsupported, std::move(message)};
}

const char* status_code_name(StatusCode code);

}  // namespace sparse_mla

// Propagates a non-ok Status to the caller.
#define SMLA_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::sparse_mla::Status smla_status_ = (expr);  \
    if (!smla_status_.ok()) return smla_status_; \
  } while (0)
