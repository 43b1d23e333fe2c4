// Builds the split-KV schedule of decode_schedule.h from per-query block counts. The rule is
// positional, so the host (one loop, build_decode_schedule) and the device planner (a CTA-wide
// prefix sum, src/cuda/planning/) evaluate the same functions and produce the same bytes:
//   the *cost line* lays the queries out in order; query q occupies [C_q, C_{q+1}) with
//   C_{q+1} = C_q + kQueryOverheadBlocks + blocks(q): its overhead units, then one unit per block.
//   Part p owns the units [p*P, (p+1)*P), P = max(min_units, ceil(C_num_queries / num_parts)), and
//   processes the blocks that lie there. An empty query sits on its last overhead unit.
//   `min_units` (0 = none) sizes the parts for the lists' upper bound instead of their valid
//   lengths (decode_part_count.h): shorter lists then leave parts empty instead of moving every
//   boundary. P >= ceil(C / num_parts) keeps every unit inside the num_parts parts.
#pragma once

#include <cstdint>

#include "planning/decode_schedule.h"

namespace sparse_mla::planning {

// blocks(q) of decode_schedule.h from the clamped list lengths (n_extra = 0 without extra list).
SMLA_HOST_DEVICE inline int32_t query_blocks(int64_t n_main, int64_t n_extra, int block_tokens) {
  return static_cast<int32_t>((n_main + block_tokens - 1) / block_tokens +
                              (n_extra + block_tokens - 1) / block_tokens);
}

// Units of the cost line one query takes.
SMLA_HOST_DEVICE inline int64_t query_cost(int32_t blocks) { return kQueryOverheadBlocks + blocks; }

// P: units per part, at least `min_units`. 1 when there is no work, so that positions still
// divide.
SMLA_HOST_DEVICE inline int64_t units_per_part(int64_t total_cost, int32_t num_parts,
                                               int64_t min_units) {
  const int64_t share = total_cost == 0 ? 1 : (total_cost + num_parts - 1) / num_parts;
  return share > min_units ? share : min_units;
}

// True when the schedule of `num_queries` queries of `blocks` blocks each (every list full: no
// lengths tensor) splits no query: each part's units are a whole number of queries' units, so
// every part boundary falls between two queries. The split kernel then writes every out and lse
// itself and a combine has nothing to merge.
SMLA_HOST_DEVICE inline bool full_lists_split_nothing(int64_t num_queries, int32_t blocks,
                                                      int32_t num_parts, int64_t min_units) {
  if (num_queries <= 0) return true;
  const int64_t query_units = query_cost(blocks);
  return units_per_part(num_queries * query_units, num_parts, min_units) % query_units == 0;
}

// Where one query lies on the cost line and which parts process it.
struct QueryPieces {
  int64_t block0_position;  // position of block 0 (C_q + overhead)
  int32_t blocks;
  int32_t first_part, last_part;  // parts processing the query, inclusive

  SMLA_HOST_DEVICE int32_t num_pieces() const { return last_part - first_part + 1; }
  // Partial-result slots the query needs (0 when one part processes it whole).
  SMLA_HOST_DEVICE int32_t split_count() const { return num_pieces() > 1 ? num_pieces() : 0; }
};

// `cost_begin` = C_q. An empty query's only position is its last overhead unit C_q + overhead - 1;
// its last part is the one owning C_{q+1} - 1 in every case.
SMLA_HOST_DEVICE inline QueryPieces query_pieces(int64_t cost_begin, int32_t blocks,
                                                 int64_t units) {
  QueryPieces pieces;
  pieces.block0_position = cost_begin + kQueryOverheadBlocks;
  pieces.blocks = blocks;
  int64_t first_unit = pieces.block0_position - (blocks > 0 ? 0 : 1);
  int64_t last_unit = cost_begin + query_cost(blocks) - 1;
  pieces.first_part = static_cast<int32_t>(first_unit / units);
  pieces.last_part = static_cast<int32_t>(last_unit / units);
  return pieces;
}

// True when no earlier query has a piece in q's first part: the last unit of query q-1 is
// C_q - 1.
SMLA_HOST_DEVICE inline bool query_opens_first_part(int32_t query, int64_t cost_begin,
                                                    const QueryPieces& pieces, int64_t units) {
  return query == 0 || (cost_begin - 1) / units < pieces.first_part;
}

// True when no later query has a piece in q's last part. `next_blocks` = blocks(q+1) (ignored for
// the last query).
SMLA_HOST_DEVICE inline bool query_closes_last_part(int32_t query, int32_t num_queries,
                                                    const QueryPieces& pieces, int32_t next_blocks,
                                                    int64_t units) {
  if (query == num_queries - 1) return true;
  QueryPieces next = query_pieces(pieces.block0_position + pieces.blocks, next_blocks, units);
  return next.first_part > pieces.last_part;
}

// The record of a part that processes nothing (also the initial value of every part).
SMLA_HOST_DEVICE inline DecodePartSchedule empty_part() {
  DecodePartSchedule part;
  part.begin_query = 0;
  part.begin_block = 0;
  part.end_query = -1;
  part.end_block = 0;
  part.begin_split = -1;
  part.first_is_split = 0;
  part.last_is_split = 0;
  part.reserved = 0;
  return part;
}

// Writes query q's share of the part records: the begin fields of every part where q comes first,
// the end fields of every part where q comes last. Different queries write disjoint fields, so
// threads may call this concurrently after the parts were set to empty_part().
// `split_offset` = split_offsets[q].
SMLA_HOST_DEVICE inline void write_query_parts(int32_t query, const QueryPieces& pieces,
                                               bool opens_first_part, bool closes_last_part,
                                               int32_t split_offset, int64_t units,
                                               DecodePartSchedule* parts) {
  bool split = pieces.num_pieces() > 1;
  for (int32_t p = pieces.first_part; p <= pieces.last_part; ++p) {
    DecodePartSchedule& part = parts[p];
    if (p > pieces.first_part || opens_first_part) {
      part.begin_query = query;
      part.begin_block =
          p == pieces.first_part ? 0 : static_cast<int32_t>(p * units - pieces.block0_position);
      part.first_is_split = p > pieces.first_part;
      part.begin_split = split ? split_offset + (p - pieces.first_part) : -1;
    }
    if (p < pieces.last_part || closes_last_part) {
      part.end_query = query;
      part.end_block = p == pieces.last_part
                           ? pieces.blocks
                           : static_cast<int32_t>((p + 1) * units - pieces.block0_position);
      part.last_is_split = p < pieces.last_part;
    }
  }
}

// The partial-result slot where `part` writes its piece of `query` (begin_query <= query <=
// end_query), or -1 when the part processes the whole query and writes `out`/`lse` directly.
// Only a part's first and last query can be split; the last one's piece is then its first piece.
SMLA_HOST_DEVICE inline int32_t piece_partial_slot(const DecodePartSchedule& part, int32_t query,
                                                   const int32_t* split_offsets) {
  if (query == part.begin_query) return part.begin_split;
  if (query == part.end_query && part.last_is_split) return split_offsets[query];
  return -1;
}

// The whole schedule on the host, one query at a time.
//   blocks         [num_queries]      int32, blocks(q)
//   parts          [num_parts]        DecodePartSchedule (output)
//   split_offsets  [num_queries + 1]  int32 (output)
// num_parts >= 1, min_units >= 0.
inline void build_decode_schedule(const int32_t* blocks, int32_t num_queries, int32_t num_parts,
                                  int64_t min_units, DecodePartSchedule* parts,
                                  int32_t* split_offsets) {
  int64_t total = 0;
  for (int32_t q = 0; q < num_queries; ++q) total += query_cost(blocks[q]);
  int64_t units = units_per_part(total, num_parts, min_units);
  for (int32_t p = 0; p < num_parts; ++p) parts[p] = empty_part();
  split_offsets[0] = 0;
  int64_t cost_begin = 0;
  for (int32_t q = 0; q < num_queries; ++q) {
    QueryPieces pieces = query_pieces(cost_begin, blocks[q], units);
    int32_t next_blocks = q + 1 < num_queries ? blocks[q + 1] : 0;
    write_query_parts(q, pieces, query_opens_first_part(q, cost_begin, pieces, units),
                      query_closes_last_part(q, num_queries, pieces, next_blocks, units),
                      split_offsets[q], units, parts);
    split_offsets[q + 1] = split_offsets[q] + pieces.split_count();
    cost_begin += query_cost(blocks[q]);
  }
}

}  // namespace sparse_mla::planning
