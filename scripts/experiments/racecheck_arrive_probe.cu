// Does compute-sanitizer racecheck model named-barrier arrive (producer) / sync (consumer)
// hand-offs? The seesaw prefill (scripts/experiments/prefill-seesaw.patch) hands shared memory
// between two 4-warp groups that way, as FlashMLA's sm90 prefill does, and racecheck reported
// hazards on it, including one across a __syncthreads() that no schedule can violate.
//
// One CTA of 256 threads: warps 0-3 (producers) write buf, arrive on barrier 1; warps 4-7
// (consumers) sync on 1, read buf, arrive on 2; producers sync on 2 before the next write. Then a
// __syncthreads-only exchange through `red`, which is race-free under any barrier model.
//   mode 0: the hand-off with barrier.arrive / barrier.sync (no .aligned; what the seesaw uses)
//   mode 1: the hand-off with bar.arrive / bar.sync (.aligned)
//   mode 2: positive control, no barriers in the loop (real read-after-write and write-after-read
//           races on buf; its checksum may be wrong)
// Build and run (a GPU machine):
//   nvcc -arch=sm_90a -lineinfo -o /tmp/probe racecheck_arrive_probe.cu
//   for m in 0 1 2; do compute-sanitizer --tool racecheck /tmp/probe $m; done
// Each run prints the consumers' checksum (it must equal the expected value) and racecheck's
// hazard summary follows.
#include <cstdio>
#include <cstdlib>

template <int kMode>
__global__ void hand_off(float* out, int rounds) {
  __shared__ float buf[128];
  __shared__ float red[256];
  const int tid = threadIdx.x;
  float acc = 0.0f;
  for (int k = 0; k < rounds; ++k) {
    if (tid < 128) {
      buf[tid] = static_cast<float>(tid + k);
      if (kMode == 1) {
        asm volatile("bar.arrive 1, 256;" ::: "memory");
        asm volatile("bar.sync 2, 256;" ::: "memory");
      } else if (kMode == 0) {
        asm volatile("barrier.arrive 1, 256;" ::: "memory");
        asm volatile("barrier.sync 2, 256;" ::: "memory");
      }
    } else {
      if (kMode == 1) {
        asm volatile("bar.sync 1, 256;" ::: "memory");
      } else if (kMode == 0) {
        asm volatile("barrier.sync 1, 256;" ::: "memory");
      }
      acc += buf[255 - tid];
      if (kMode == 1) {
        asm volatile("bar.arrive 2, 256;" ::: "memory");
      } else if (kMode == 0) {
        asm volatile("barrier.arrive 2, 256;" ::: "memory");
      }
    }
  }
  __syncthreads();
  red[tid] = acc;
  __syncthreads();
  out[tid] = red[255 - tid];
}

int main(int argc, char** argv) {
  const int mode = argc > 1 ? std::atoi(argv[1]) : 0;
  const int rounds = 4;
  float* out = nullptr;
  cudaMalloc(&out, 256 * sizeof(float));
  if (mode == 0) hand_off<0><<<1, 256>>>(out, rounds);
  if (mode == 1) hand_off<1><<<1, 256>>>(out, rounds);
  if (mode == 2) hand_off<2><<<1, 256>>>(out, rounds);
  float host[256];
  cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost);
  // Consumer tid (128..255) read buf[255 - tid] in rounds 0..3: sum (255 - tid + k) = 4 (255 -
  // tid) + 6; out[t] = red[255 - t] holds consumer 255 - t's sum for t < 128, i.e. 4 t + 6.
  double sum = 0.0, expected = 0.0;
  for (int t = 0; t < 128; ++t) {
    sum += host[t];
    expected += 4.0 * t + 6.0;
  }
  std::printf("mode %d: checksum %.0f (expected %.0f) %s\n", mode, sum, expected,
              cudaGetLastError() == cudaSuccess ? "ok" : "cuda error");
  cudaFree(out);
  return 0;
}
