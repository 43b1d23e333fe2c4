// The index union on the host (planning/index_union.h's rule, the union kernel's two passes in
// cuda/planning/index_union.cu): what the host test checks the rule with and what the GPU test
// compares the kernel's output with, entry for entry.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "planning/index_union.h"

namespace sparse_mla::planning {

struct HostUnion {
  std::vector<int32_t> indices;
  std::vector<uint8_t> bits;
};

// One request's union of one list: lists[t] is token t's list, lengths[t] its clamped length,
// num_slots the cache's slots (valid iff 0 <= index < num_slots).
inline HostUnion host_union(const std::vector<std::vector<int32_t>>& lists,
                            const std::vector<int>& lengths, int64_t num_slots) {
  std::map<int32_t, uint32_t> seen;
  const auto valid = [&](int token, size_t k) {
    return static_cast<int>(k) < lengths[token] && lists[token][k] >= 0 &&
           lists[token][k] < num_slots;
  };
  for (int t = 0; t < static_cast<int>(lists.size()); ++t) {
    for (size_t k = 0; k < lists[t].size(); ++k) {
      if (!valid(t, k)) continue;
      uint32_t& s = seen[lists[t][k]];
      if (s & (1u << t)) s |= 1u << (8 + t);
      s |= 1u << t;
    }
  }
  HostUnion u;
  for (int t = 0; t < static_cast<int>(lists.size()); ++t) {
    for (size_t k = 0; k < lists[t].size(); ++k) {
      if (!valid(t, k)) continue;
      const UnionEntry e = union_entry(seen[lists[t][k]], t);
      if (!e.keep) continue;
      u.indices.push_back(lists[t][k]);
      u.bits.push_back(e.bits);
    }
  }
  return u;
}

}  // namespace sparse_mla::planning
