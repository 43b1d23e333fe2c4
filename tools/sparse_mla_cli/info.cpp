// `sparse-mla info`: the machine a result would be measured on — CPU model and threads, the
// fp32 GEMM rate and host copy bandwidth measured now (the CPU back end's ceilings), the CUDA
// devices this build sees, and the source commit.
#include <iostream>

#include "commands.h"
#include "flags.h"
#include "gemm_ceiling.h"
#include "machine.h"
#include "sparse_mla/backend.h"
#include "table.h"

namespace sparse_mla::cli {

int info_command(const Invocation& inv) {
  int64_t gemm_n = kGemmN;
  bool skip_measure = false;
  FlagSet flags("info");
  flags.add_int("gemm_n", &gemm_n, "size of the fp32 GEMM that measures the CPU ceiling", 64, 8192);
  flags.add_switch("no_measure", &skip_measure, "skip the GEMM and copy measurements");
  if (Status st = flags.parse(inv.args); !st.ok()) {
    std::cerr << "sparse-mla info: " << st.message() << "\n";
    return kExitUsageError;
  }
  if (flags.help_requested()) {
    std::cout << "usage: sparse-mla info [flags]\n\n" << flags.usage();
    return kExitOk;
  }
  const MachineInfo m = describe_machine();
  const SourceInfo src = describe_source();
  std::cout << "sparse-mla " << src.library_version << ", commit " << src.commit
            << (src.dirty ? " (uncommitted changes)" : "") << "\n";
  std::cout << "host: " << m.hostname << "\n";
  std::cout << "cpu: " << m.cpu_model << ", " << m.hardware_threads << " hardware threads\n";
  if (!skip_measure) {
    std::optional<GemmCeiling> gemm = measure_fp32_gemm(static_cast<int>(gemm_n), kGemmRepeats);
    if (gemm) {
      std::cout << "cpu fp32 GEMM: " << format_rate(gemm->flop_per_s, "FLOP/s") << " (sgemm "
                << gemm->n << "^3, best of " << gemm->repeats << ", " << gemm->library << ")\n";
    } else {
      std::cout << "cpu fp32 GEMM: not measured (built without CBLAS)\n";
    }
    CopyBandwidth copy = measure_host_copy(kHostCopyBytes, kHostCopyRepeats);
    std::cout << "host copy: " << format_rate(copy.bytes_per_s, "B/s") << " (read + written, "
              << (copy.buffer_bytes >> 20) << " MiB memcpy, " << copy.threads
              << " threads, best of " << copy.repeats << ")\n";
  }
  std::cout << "cuda devices: " << m.gpus.size()
            << (cuda_available() ? "" : " (build without CUDA, or no device visible)") << "\n";
  for (const DeviceInfo& g : m.gpus) {
    std::cout << "  cuda:" << g.index << " " << g.name << ", sm_" << g.cc_major << g.cc_minor
              << ", " << g.sm_count << " SMs, max SM clock " << g.max_sm_clock_mhz << " MHz, "
              << (g.memory_bytes >> 30) << " GiB, L2 " << (g.l2_bytes >> 20) << " MiB, memory "
              << g.memory_clock_mhz << " MHz x " << g.memory_bus_bits << " bit\n";
  }
  return kExitOk;
}

}  // namespace sparse_mla::cli
