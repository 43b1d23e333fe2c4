// The KV-cache flags (cache_flags.h).
#include "cache_flags.h"

namespace sparse_mla::cli {

std::vector<std::string> kv_cache_format_choices() {
  std::vector<std::string> names;
  for (KvCacheFormat f : {KvCacheFormat::kV32Fp8, KvCacheFormat::kV4Fp8, KvCacheFormat::kBf16,
                          KvCacheFormat::kV41Fp8, KvCacheFormat::kV41Fp4}) {
    names.emplace_back(kv_cache_format_name(f));
  }
  return names;
}

void CacheFlags::declare(FlagSet* f, const std::string& default_format) {
  format = default_format;
  f->add_string("format", &format, "decode: KV-cache format", kv_cache_format_choices());
  f->add_string("kv_layout", &kv_layout,
                "decode: the cache's page layout (V4.1 records have both); default: the "
                "format's own",
                {"page_split", "token_interleaved"});
  f->add_string("extra_format", &extra_format,
                "decode: the extra cache's format (a v41_fp8 main cache takes v41_fp4); default: "
                "--format",
                kv_cache_format_choices());
  f->add_string("extra_kv_layout", &extra_kv_layout,
                "decode: the extra cache's page layout; default: its format's own",
                {"page_split", "token_interleaved"});
  f->set_default_text("kv_layout", "");
  f->set_default_text("extra_format", "");
  f->set_default_text("extra_kv_layout", "");
}

namespace {

Status check_layout(const char* flag, KvLayout layout, KvCacheFormat format,
                    const char* format_flag) {
  if (kv_cache_layout_supported(format, layout)) return {};
  return invalid_argument(std::string("--") + flag + " = " + kv_layout_name(layout) +
                          " is not a layout of " + format_flag + " " +
                          kv_cache_format_name(format) + " (it has " +
                          kv_layout_name(resolve_kv_layout(format, KvLayout::kDefault)) + " only)");
}

}  // namespace

Status resolve(const CacheFlags& flags, const FlagSet& f, bool has_extra, ResolvedCaches* out) {
  *out = ResolvedCaches{};
  out->format = *parse_kv_cache_format(flags.format);  // the flag's choices are the names
  if (!flags.kv_layout.empty()) {
    out->kv_layout = *parse_kv_layout(flags.kv_layout);
    SMLA_RETURN_IF_ERROR(check_layout("kv_layout", out->kv_layout, out->format, "--format"));
  }
  for (const char* name : {"extra_format", "extra_kv_layout"}) {
    if (f.was_set(name) && !has_extra) {
      return invalid_argument(std::string("--") + name + " needs --extra_topk (an extra cache)");
    }
  }
  if (!flags.extra_format.empty()) {
    const KvCacheFormat extra = *parse_kv_cache_format(flags.extra_format);
    if (!kv_cache_extra_format_allowed(out->format, extra)) {
      return invalid_argument("--extra_format = " + flags.extra_format +
                              " cannot go with --format " + flags.format + " (" +
                              kv_cache_extra_format_rule(out->format) + ")");
    }
    out->extra_format = extra;
  }
  if (!flags.extra_kv_layout.empty()) {
    out->extra_kv_layout = *parse_kv_layout(flags.extra_kv_layout);
    SMLA_RETURN_IF_ERROR(check_layout("extra_kv_layout", out->extra_kv_layout,
                                      out->extra_format.value_or(out->format),
                                      out->extra_format ? "--extra_format" : "--format"));
  }
  return {};
}

}  // namespace sparse_mla::cli
