// The KV-cache flags shared by `sparse-mla bench` and `sparse-mla list`: --format, --kv_layout
// (page_split or token_interleaved; default the format's own), --extra_format (the extra cache's;
// default the main format) and --extra_kv_layout. resolve() refuses a layout the format lacks and
// an extra format that cannot go with the main one, naming the flag and the value.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "flags.h"
#include "sparse_mla/kv_cache_format.h"
#include "sparse_mla/status.h"

namespace sparse_mla::cli {

// Every format name of the traits table: the --format / --extra_format choices.
std::vector<std::string> kv_cache_format_choices();

struct CacheFlags {
  std::string format = "v4_fp8";
  std::string kv_layout, extra_format, extra_kv_layout;  // "" = the default

  // Declares --format (with this default), --kv_layout, --extra_format, --extra_kv_layout.
  void declare(FlagSet* f, const std::string& default_format);
};

struct ResolvedCaches {
  KvCacheFormat format = KvCacheFormat::kV4Fp8;
  KvLayout kv_layout = KvLayout::kDefault;    // as given (kDefault when not)
  std::optional<KvCacheFormat> extra_format;  // nullopt when not given
  KvLayout extra_kv_layout = KvLayout::kDefault;
};

// Parses and checks the flags; `has_extra` says whether the case has an extra cache (the extra
// flags need one).
Status resolve(const CacheFlags& flags, const FlagSet& f, bool has_extra, ResolvedCaches* out);

}  // namespace sparse_mla::cli
