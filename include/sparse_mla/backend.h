// Back-end selection and per-call options shared by every operation.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace sparse_mla {

enum class Backend {
  kAuto,       // CUDA when the tensors live on a CUDA device, else CPU
  kCpu,        // threaded CPU back end (host tensors)
  kCuda,       // best CUDA kernel variant for the device (device tensors)
  kReference,  // the CPU reference: double accumulation, single thread, the definition of correct
};

const char* backend_name(Backend backend);
std::optional<Backend> parse_backend(std::string_view name);  // "auto", "cpu", "cuda", "reference"

// cudaStream_t passed opaquely so that public headers need no CUDA; nullptr = default stream.
using StreamHandle = void*;

struct RunOptions {
  Backend backend = Backend::kAuto;
  StreamHandle stream = nullptr;
  int num_threads = 0;  // CPU back end: 0 = all hardware threads, N > 0 = N; < 0 rejected
  std::string kernel;   // force one kernel variant by name ("" = pick the best)
};

// True when this build has CUDA support compiled in and at least one device is visible.
bool cuda_available();

}  // namespace sparse_mla
