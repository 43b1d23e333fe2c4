// Which tile instantiation of a portable kernel runs on a device: head rows per CTA and keys per
// KV block, from the problem's natural tile, the kernel's preferred key count and the device's
// opt-in shared memory per block. Host-only and pure, so the choice for every device class
// (sm_80 163 KiB, sm_86/89 99 KiB, sm_90 227 KiB) is unit-tested without those devices.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

namespace sparse_mla::cuda {

struct TileChoice {
  int rows = 0;        // head rows per CTA: 16, 32 or 64; 0 = nothing fits
  int block_keys = 0;  // KV slots per block: 64 or 32
  int smem_bytes = 0;  // dynamic shared memory of the chosen instantiation
};

// Shared memory of the (rows, keys) instantiation, or 0 if there is none.
using TileSmemFn = std::function<int(int rows, int block_keys)>;

// Tries, in order: the natural head rows with the preferred then the other key count, then
// half the rows (more head groups per query) likewise, down to 16 rows. The first whose shared
// memory fits `smem_optin` wins. forced_keys (32 or 64; 0 = none) replaces the preference.
// Deterministic, so a plan and the run that follows it agree.
TileChoice choose_tile(int natural_rows, int preferred_keys, int forced_keys, int smem_optin,
                       const TileSmemFn& smem);

// "needs N bytes of shared memory per block; the device allows M" for the smallest tile.
std::string tile_does_not_fit(int natural_rows, int smem_optin, const TileSmemFn& smem);

// choose_tile over a kernel's instantiation table: the rows of `table` for which
// `matches(entry)` holds (same format / d_qk) are the candidates; Entry has `int rows,
// block_keys` and `int (*smem)()`. Returns the chosen row, or nullptr with *why_not set.
template <class Entry, class Matches>
const Entry* choose_tile_entry(std::span<const Entry> table, Matches matches, int natural_rows,
                               int preferred_keys, int forced_keys, int smem_optin,
                               std::string* why_not) {
  auto find = [&](int rows, int keys) -> const Entry* {
    for (const Entry& e : table) {
      if (matches(e) && e.rows == rows && e.block_keys == keys) return &e;
    }
    return nullptr;
  };
  const TileSmemFn smem = [&](int rows, int keys) {
    const Entry* e = find(rows, keys);
    return e != nullptr ? e->smem() : 0;
  };
  const TileChoice tile = choose_tile(natural_rows, preferred_keys, forced_keys, smem_optin, smem);
  if (tile.rows == 0) {
    *why_not = tile_does_not_fit(natural_rows, smem_optin, smem);
    return nullptr;
  }
  return find(tile.rows, tile.block_keys);
}

}  // namespace sparse_mla::cuda
