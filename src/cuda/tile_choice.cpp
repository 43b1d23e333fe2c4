#include "cuda/tile_choice.h"

namespace sparse_mla::cuda {

TileChoice choose_tile(int natural_rows, int preferred_keys, int forced_keys, int smem_optin,
                       const TileSmemFn& smem) {
  const int first = forced_keys != 0 ? forced_keys : preferred_keys;
  const int second = first == 64 ? 32 : 64;
  for (int rows = natural_rows; rows >= 16; rows /= 2) {
    for (const int keys : {first, second}) {
      const int bytes = smem(rows, keys);
      if (bytes > 0 && bytes <= smem_optin) return {rows, keys, bytes};
    }
  }
  return {};
}

std::string tile_does_not_fit(int natural_rows, int smem_optin, const TileSmemFn& smem) {
  int smallest = 0;
  for (int rows = natural_rows; rows >= 16; rows /= 2) {
    for (const int keys : {64, 32}) {
      const int bytes = smem(rows, keys);
      if (bytes > 0 && (smallest == 0 || bytes < smallest)) smallest = bytes;
    }
  }
  if (smallest == 0) return "no instantiation for this shape";
  return "needs " + std::to_string(smallest) +
         " bytes of shared memory per block; the device allows " + std::to_string(smem_optin);
}

}  // namespace sparse_mla::cuda
