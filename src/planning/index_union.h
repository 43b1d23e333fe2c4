// The index union of a decode request's query tokens (MTP / draft tokens, s_q 2..8): one list of
// the slots any of its tokens attends, each slot with a byte of token bits saying which tokens
// attend it, so that a kernel gathers (and dequantises) a row shared by several tokens once and
// scores it for all of their heads in one tile (docs/kernels/index_union.md).
//
// Per request and per list (main, extra), for the valid entries of every token's list (position
// < its clamped topk_length, 0 <= index < the cache's slots; the rest are dropped):
//   - a slot that no token lists twice is kept once, at its first token's position, with the bits
//     of every token that lists it;
//   - every occurrence of a slot that some token lists more than once is kept as its own entry
//     with only its token's bit (SPEC: a duplicate counts once per occurrence, per token).
// The union is ordered by (token, position) of the entries kept, so it is the same on every run.
// Each token's attended multiset is exactly its valid entries: a token's softmax over the union
// with its bit as the mask is its own softmax over its own list, summed in another order.
//
// Workspace region (after the decode's own, planning/decode_workspace.h), per list:
//   indices [b, capacity] int32    the union, then -1 up to capacity
//   bits    [b, capacity] uint8    the token bits of each entry, 0 past the union
//   count   [b]           int32    the union's length (the kernels' per-request topk_length)
// capacity = s_q * topk rounded up to 128 slots (whole 64-slot blocks). The decode copies a
// block's 64 bytes of bits whole, also the last block's past the union's length, so the 0 bits
// (and -1 indices) from the length up to the capacity are what keep those slots unattended.
#pragma once

#include <cstdint>

#include "core/host_device.h"
#include "planning/decode_workspace.h"

namespace sparse_mla::planning {

// Most tokens one request's union covers: the bits are a byte.
inline constexpr int kMaxUnionTokens = 8;
// Most entries (s_q * topk) of one list the union kernel takes: its hash table of twice as many
// 8-B slots fills 128 KiB of shared memory.
inline constexpr int64_t kMaxUnionEntries = 8192;
inline constexpr int64_t kUnionCapacityAlign = 128;

SMLA_HOST_DEVICE inline int64_t union_capacity(int64_t s_q, int64_t topk) {
  return (s_q * topk + kUnionCapacityAlign - 1) / kUnionCapacityAlign * kUnionCapacityAlign;
}

// What the union keeps of one occurrence of a slot at token `token`, given `seen`, the slot's
// token bits over all the request's tokens' entries of this list (main and extra lists index
// different caches and have their own unions): bit t = token t lists it, bit 8 + t = token t
// lists it more than once.
struct UnionEntry {
  bool keep;
  uint8_t bits;  // the tokens that attend the kept entry
};

SMLA_HOST_DEVICE inline UnionEntry union_entry(uint32_t seen, int token) {
  const uint32_t once = seen & 0xffu;
  if ((seen >> 8) != 0) return {true, static_cast<uint8_t>(1u << token)};
  return {(once & ((1u << token) - 1u)) == 0, static_cast<uint8_t>(once)};
}

struct IndexUnionLayout {
  int64_t capacity = 0, extra_capacity = 0;  // per request; extra 0 without an extra list
  int64_t indices_offset = 0, bits_offset = 0, count_offset = 0;
  int64_t extra_indices_offset = 0, extra_bits_offset = 0, extra_count_offset = 0;
  int64_t end = 0;  // one past the region (256-B aligned)
};

// The region from byte `begin` (256-B aligned) of the workspace on.
SMLA_HOST_DEVICE inline IndexUnionLayout index_union_layout(int64_t begin, int64_t b, int64_t s_q,
                                                            int64_t topk, int64_t extra_topk) {
  IndexUnionLayout layout;
  layout.capacity = union_capacity(s_q, topk);
  layout.extra_capacity = extra_topk > 0 ? union_capacity(s_q, extra_topk) : 0;
  int64_t at = begin;
  const auto take = [&](int64_t bytes) {
    const int64_t offset = at;
    at = align_workspace(at + bytes);
    return offset;
  };
  layout.indices_offset = take(b * layout.capacity * 4);
  layout.bits_offset = take(b * layout.capacity);
  layout.count_offset = take(b * 4);
  layout.extra_indices_offset = take(b * layout.extra_capacity * 4);
  layout.extra_bits_offset = take(b * layout.extra_capacity);
  layout.extra_count_offset = take(b * 4);
  layout.end = at;
  return layout;
}

// Typed pointers into the region; the extra ones are unused without an extra list.
struct IndexUnion {
  int32_t* indices;
  uint8_t* bits;
  int32_t* count;
  int32_t* extra_indices;
  uint8_t* extra_bits;
  int32_t* extra_count;
};

SMLA_HOST_DEVICE inline IndexUnion carve_index_union(void* workspace,
                                                     const IndexUnionLayout& layout) {
  auto* bytes = static_cast<uint8_t*>(workspace);
  return {reinterpret_cast<int32_t*>(bytes + layout.indices_offset),
          bytes + layout.bits_offset,
          reinterpret_cast<int32_t*>(bytes + layout.count_offset),
          reinterpret_cast<int32_t*>(bytes + layout.extra_indices_offset),
          bytes + layout.extra_bits_offset,
          reinterpret_cast<int32_t*>(bytes + layout.extra_count_offset)};
}

}  // namespace sparse_mla::planning
