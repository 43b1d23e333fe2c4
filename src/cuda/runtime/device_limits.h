// The device attributes that kernel choice reads (compute capability, SM count, opt-in shared
// memory per block), asked of the CUDA runtime once per device and remembered: dispatch reads them
// in every supports / plan / run, and a device's attributes do not change while the process runs.
// The struct is host-only (no CUDA header), so the host-tested launch policy takes it too.
#pragma once

#include <string>

namespace sparse_mla::cuda {

struct DeviceLimits {
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int smem_optin = 0;  // cudaDevAttrMaxSharedMemoryPerBlockOptin, bytes
};

// The limits of CUDA device `device`, or false with "cannot query CUDA device N" in *why_not.
// Thread-safe; the first successful query per device is remembered, a failed one is not (the
// next call asks again). Devices past the first 64 are asked every time.
bool device_limits(int device, DeviceLimits* limits, std::string* why_not);

}  // namespace sparse_mla::cuda
