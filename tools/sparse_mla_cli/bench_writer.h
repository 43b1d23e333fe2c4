// `sparse-mla bench --op write_kv_cache`: the cache writer (kv_cache_codec.h's write_kv_cache)
// on --n bf16 rows of d_qk values into a cache of --format / --kv_layout with --page_block_size
// tokens per page and --s_kv slots (default 4 * n), the rows mapped to distinct random slots.
// Reports the median time, the bytes moved (rows and slots read, records written), the rate, the
// bytes floor (bytes / the machine's bandwidth ceiling) and the share of it; checks the written
// cache against the host writer byte for byte.
#pragma once

#include "bench_types.h"
#include "flags.h"

namespace sparse_mla::cli::bench {

// Runs the benchmark the flags describe; the exit code (kExitUsageError for refused flags).
int writer_bench(const Settings& s, const FlagSet& f, const std::vector<std::string>& argv);

}  // namespace sparse_mla::cli::bench
