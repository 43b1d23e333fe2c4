// The mma.sync ceiling of the portable kernels on the card it runs on: how many bf16 TFLOP/s
// `mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32` (the only tensor-core instruction the portable
// back end uses) reaches with nothing else in the way, and with the portable kernels' fragment
// traffic from shared memory in the way.
//
//   nvcc -O3 -std=c++20 -arch=sm_90a -I src -o mma_ceiling \
//     benchmarks/microbench/mma_sync_ceiling.cu
//   ./mma_ceiling [--json FILE]
//
// Two loops, each warp with `kChains` independent 16x8 fp32 accumulators:
//   registers  kChains MMAs per iteration on register operands (no loads): the tensor pipe alone;
//   smem       per iteration 2 A + 2 B ldmatrix.x4 (conflict-free, 2 KB) then 8 MMAs: the
//              ratio of the 64-row prefill's QK^T (common/wide_tile_attention.cuh wide_score:
//              4 ldmatrix.x4 per 8 m16n8k16), with the loads of the next iteration free to
//              overlap the MMAs of this one (double-buffered fragments).
// for 4, 8, 16 and 32 warps per SM (one CTA per SM of 4 / 8 / 16 / 32 warps, 1 CTA per SM).
// FLOP per MMA = 2 * 16 * 8 * 16 = 4096. Times: CUDA events, best of 5 launches after a warm-up.
// The sparse prefill's TFLOP/s divided by the `smem` ceiling is the fraction of what an
// mma.sync kernel with that fragment traffic can reach on this card.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/device/ptx/ldmatrix.cuh"
#include "cuda/device/ptx/mma.cuh"

namespace {

namespace ptx = sparse_mla::cuda::ptx;

constexpr int kIters = 4096;

// Operands from registers only. The A and B values are thread-dependent so nothing folds; the
// accumulators are summed into `sink` so nothing is dead.
template <int kChains>
__global__ void mma_registers(float* sink, int iters) {
  uint32_t a[4];
  for (int i = 0; i < 4; ++i) a[i] = 0x3f803f80u ^ (threadIdx.x * 2654435761u + i);
  const uint32_t b0 = a[1] ^ 0x00010001u, b1 = a[2] ^ 0x00020002u;
  float d[kChains][4] = {};
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) ptx::mma_m16n8k16_bf16_f32(d[c], a, b0, b1);
  }
  float s = 0.0f;
#pragma unroll
  for (int c = 0; c < kChains; ++c) s += d[c][0] + d[c][1] + d[c][2] + d[c][3];
  if (s == 1.2345f) sink[threadIdx.x] = s;  // never true in practice; keeps the loop alive
}

// 2 A + 2 B ldmatrix.x4 then 8 MMAs per iteration (the wide prefill's QK^T ratio). Each warp
// reads its own 4 KB of shared memory in 2 KB steps; lane l reads row l (16 B) of an 8x128-B
// band, so each 8-lane phase covers 128 contiguous bytes (conflict-free).
__global__ void mma_smem(float* sink, int iters) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = threadIdx.x; i < 4 * 1024 * (blockDim.x / 32) / 4; i += blockDim.x) {
    reinterpret_cast<uint32_t*>(smem)[i] = 0x3f803f80u ^ (i * 2654435761u);
  }
  __syncthreads();
  const uint32_t base =
      static_cast<uint32_t>(__cvta_generic_to_shared(smem)) + warp * 4 * 1024 + lane * 16;
  float d[8][4] = {};
  uint32_t a[2][4], b[2][4];
#pragma unroll 4
  for (int it = 0; it < iters; ++it) {
    const uint32_t step = base + (it % 2) * 2048;
#pragma unroll
    for (int m = 0; m < 2; ++m) ptx::ldmatrix_x4(a[m], step + m * 512);
#pragma unroll
    for (int k = 0; k < 2; ++k) ptx::ldmatrix_x4(b[k], step + 1024 + k * 512);
#pragma unroll
    for (int m = 0; m < 2; ++m) {
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        ptx::mma_m16n8k16_bf16_f32(d[4 * m + 2 * k], a[m], b[k][0], b[k][1]);
        ptx::mma_m16n8k16_bf16_f32(d[4 * m + 2 * k + 1], a[m], b[k][2], b[k][3]);
      }
    }
  }
  float s = 0.0f;
#pragma unroll
  for (int c = 0; c < 8; ++c) s += d[c][0] + d[c][1] + d[c][2] + d[c][3];
  if (s == 1.2345f) sink[threadIdx.x] = s;
}

// Best of 5 timed launches after a warm-up; a negative result when the configuration does not
// launch (e.g. 1,024 threads x more than 64 registers exceeds the SM's register file).
template <class Launch>
float best_ms(Launch launch) {
  launch();  // warm-up
  if (cudaGetLastError() != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) return -1.0f;
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  float best = 1e30f;
  for (int rep = 0; rep < 5; ++rep) {
    cudaEventRecord(start);
    launch();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start, stop);
    best = ms < best ? ms : best;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return best;
}

struct Row {
  std::string loop;
  int warps_per_sm;
  int chains;
  double tflops;
};

}  // namespace

int main(int argc, char** argv) {
  const char* json_path = nullptr;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) json_path = argv[i + 1];
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    std::fprintf(stderr, "mma_sync_ceiling: no CUDA device\n");
    return 1;
  }
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  const int sms = prop.multiProcessorCount;
  float* sink = nullptr;
  cudaMalloc(&sink, 1024 * sizeof(float));
  std::vector<Row> rows;

  auto report = [&](const char* loop, int warps, int chains, double mmas, float ms) {
    if (ms < 0.0f) {
      std::printf("%-9s  %2d warps/SM  %2d accumulators/warp  does not launch (skipped)\n", loop,
                  warps, chains);
      return;
    }
    const double tflops = mmas * 4096.0 / (ms * 1e-3) / 1e12;
    rows.push_back({loop, warps, chains, tflops});
    std::printf("%-9s  %2d warps/SM  %2d accumulators/warp  %7.3f ms  %6.1f TFLOP/s\n", loop, warps,
                chains, ms, tflops);
  };
  for (int warps : {4, 8, 16, 32}) {
    const dim3 grid(sms), block(32 * warps);
    auto run_registers = [&]<int kChains>() {
      const float ms = best_ms([&] { mma_registers<kChains><<<grid, block>>>(sink, kIters); });
      report("registers", warps, kChains, static_cast<double>(sms) * warps * kIters * kChains, ms);
    };
    run_registers.template operator()<4>();
    run_registers.template operator()<8>();
    run_registers.template operator()<16>();
    const int smem_bytes = warps * 4 * 1024;
    if (smem_bytes <= static_cast<int>(prop.sharedMemPerBlockOptin)) {
      cudaFuncSetAttribute(mma_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
      const float ms = best_ms([&] { mma_smem<<<grid, block, smem_bytes>>>(sink, kIters); });
      report("smem", warps, 8, static_cast<double>(sms) * warps * kIters * 8, ms);
    }
  }
  const cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    std::fprintf(stderr, "mma_sync_ceiling: %s\n", cudaGetErrorString(err));
    return 1;
  }
  std::printf("device: %s, %d SMs, max clock %d MHz\n", prop.name, sms, clock_khz / 1000);
  if (json_path != nullptr) {
    FILE* f = std::fopen(json_path, "w");
    if (f == nullptr) return 1;
    std::fprintf(f, "{\"device\": \"%s\", \"sms\": %d, \"max_clock_mhz\": %d, \"rows\": [\n",
                 prop.name, sms, clock_khz / 1000);
    for (size_t i = 0; i < rows.size(); ++i) {
      std::fprintf(f,
                   "  {\"loop\": \"%s\", \"warps_per_sm\": %d, \"accumulators_per_warp\": %d, "
                   "\"tflop_per_s\": %.1f}%s\n",
                   rows[i].loop.c_str(), rows[i].warps_per_sm, rows[i].chains, rows[i].tflops,
                   i + 1 < rows.size() ? "," : "");
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  cudaFree(sink);
  return 0;
}
