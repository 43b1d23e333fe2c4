// `sparse-mla list`: every kernel variant of this build and, for a problem given by flags, whether
// it can run it and why not; for decode also the plan each back end would make. CUDA variants are
// judged for tensors on cuda:0, CPU and reference variants for host tensors.
#include <iostream>

#include "cache_flags.h"
#include "commands.h"
#include "flags.h"
#include "sparse_mla/sparse_mla.h"
#include "table.h"

namespace sparse_mla::cli {

namespace {

struct ListSettings {
  std::string op;  // "" = both
  int64_t b = 1, s_q = 1, s_kv = 8192, h_q = 128, d_qk = 0, topk = 2048, page_block_size = 64;
  CacheFlags caches;  // --format (default v32_fp8), --kv_layout, --extra_format, ...
  int64_t extra_topk = 0, extra_page_block_size = 64;
  std::string topk_length = "none", extra_topk_length = "none";
  bool attn_sink = false;
};

// One row per variant: CUDA ones from the cuda:0 listing, the others from the host listing.
template <typename Problem, typename ListFn>
void print_kernels(const char* title, Problem problem, ListFn list) {
  problem.device = Device::cpu();
  std::vector<KernelAvailability> host = list(problem);
  problem.device = Device::cuda(0);
  std::vector<KernelAvailability> gpu = list(problem);
  Table t({"kernel", "back end", "usable", "why not"});
  for (size_t i = 0; i < host.size() && i < gpu.size(); ++i) {
    const KernelAvailability& k = host[i].backend == Backend::kCuda ? gpu[i] : host[i];
    t.add_row({k.name, backend_name(k.backend), k.usable ? "yes" : "no", k.why_not});
  }
  std::cout << title << "\n";
  t.print(std::cout);
}

void print_plans(SparseDecodeProblem problem) {
  std::cout << "\ndecode plans:\n";
  Table t({"back end", "kernel", "num_sm_parts", "workspace", "reason"});
  for (Backend backend : {Backend::kCuda, Backend::kCpu, Backend::kReference}) {
    problem.device = backend == Backend::kCuda ? Device::cuda(0) : Device::cpu();
    RunOptions options;
    options.backend = backend;
    DecodePlan plan;
    Status st = plan_sparse_decode(problem, &plan, options);
    if (st.ok()) {
      t.add_row({backend_name(backend), plan.kernel, std::to_string(plan.num_sm_parts),
                 std::to_string(plan.workspace_bytes) + " B", plan.reason});
    } else {
      t.add_row({backend_name(backend), "-", "-", "-", st.message()});
    }
  }
  t.print(std::cout);
}

}  // namespace

int list_command(const Invocation& inv) {
  ListSettings s;
  FlagSet f("list");
  f.add_string("op", &s.op, "operation; both when not given", {"prefill", "decode"});
  f.add_int("b", &s.b, "decode: requests", 0, 1 << 20);
  f.add_int("s_q", &s.s_q, "query tokens (prefill) / per request (decode)", 0, 1 << 24);
  f.add_int("s_kv", &s.s_kv, "prefill: kv rows", 1, int64_t{1} << 31);
  f.add_int("h_q", &s.h_q, "query heads", 1, 128);
  f.add_int("d_qk", &s.d_qk, "512 or 576; 0 = 576 for prefill, the format's for decode", 0, 576);
  f.add_int("topk", &s.topk, "index slots per query", 1, 1 << 20);
  s.caches.declare(&f, "v32_fp8");
  f.add_int("page_block_size", &s.page_block_size, "decode: tokens per page block", 1, 1 << 16);
  f.add_int("extra_topk", &s.extra_topk, "decode: extra cache slots; 0 = no extra cache", 0,
            1 << 20);
  f.add_int("extra_page_block_size", &s.extra_page_block_size, "decode: extra cache page size", 1,
            1 << 16);
  f.add_string("topk_length", &s.topk_length, "lengths tensor", {"none", "request", "token"});
  f.add_string("extra_topk_length", &s.extra_topk_length, "decode: extra lengths tensor",
               {"none", "request", "token"});
  f.add_switch("attn_sink", &s.attn_sink, "with an attention sink");
  if (Status st = f.parse(inv.args); !st.ok()) {
    std::cerr << "sparse-mla list: " << st.message() << "\n";
    return kExitUsageError;
  }
  if (f.help_requested()) {
    std::cout << "usage: sparse-mla list [flags]\n\n" << f.usage();
    return kExitOk;
  }
  if (s.op == "prefill" && s.topk_length == "token") {
    std::cerr << "sparse-mla list: --topk_length = token is a decode shape; prefill lengths are "
                 "per query token already (use request)\n";
    return kExitUsageError;
  }
  ResolvedCaches caches;
  if (Status st = resolve(s.caches, f, s.extra_topk > 0, &caches); !st.ok()) {
    std::cerr << "sparse-mla list: " << st.message() << "\n";
    return kExitUsageError;
  }
  const KvCacheFormat format = caches.format;
  const KvCacheFormatInfo& info = kv_cache_format_info(format);
  // Kernels judge validated problems only: refuse shapes no call could have.
  if (s.d_qk != 0 && s.d_qk != 512 && s.d_qk != 576) {
    std::cerr << "sparse-mla list: --d_qk = " << s.d_qk << " must be 512 or 576\n";
    return kExitUsageError;
  }
  if (s.op != "prefill" && s.d_qk != 0 && info.d_qk != 0 && s.d_qk != info.d_qk) {
    std::cerr << "sparse-mla list: --d_qk = " << s.d_qk << " does not match --format "
              << s.caches.format << " (d_qk " << info.d_qk << ")\n";
    return kExitUsageError;
  }

  // Judge only problems a call could pose, checked as the library checks them: a listing of
  // "usable" kernels for a problem planning refuses would mislead.
  int exit_code = kExitOk;
  auto refuse = [&](const char* what, const Status& st) {
    std::cerr << "sparse-mla list: the " << what << " problem is invalid: " << st.message() << "\n";
    exit_code = kExitUsageError;
  };

  if (s.op.empty() || s.op == "prefill") {
    SparsePrefillProblem p;
    p.s_q = s.s_q;
    p.s_kv = s.s_kv;
    p.h_q = s.h_q;
    p.d_qk = s.d_qk != 0 ? s.d_qk : 576;
    p.topk = s.topk;
    p.has_attn_sink = s.attn_sink;
    p.has_topk_length = s.topk_length != "none";
    std::cout << "prefill s_q=" << p.s_q << " s_kv=" << p.s_kv << " h_q=" << p.h_q
              << " d_qk=" << p.d_qk << " d_v=" << p.d_v << " topk=" << p.topk
              << (p.has_attn_sink ? " attn_sink" : "") << (p.has_topk_length ? " topk_length" : "")
              << "\n";
    if (Status st = validate_problem(p); !st.ok()) {
      refuse("prefill", st);
    } else {
      print_kernels("prefill kernels:", p, list_prefill_kernels);
    }
    if (s.op.empty()) std::cout << "\n";
  }
  if (s.op.empty() || s.op == "decode") {
    SparseDecodeProblem p;
    p.b = s.b;
    p.s_q = s.s_q;
    p.h_q = s.h_q;
    p.d_qk = s.d_qk != 0 ? s.d_qk : (info.d_qk != 0 ? info.d_qk : 576);
    p.topk = s.topk;
    p.format = format;
    p.kv_layout = caches.kv_layout;
    p.page_block_size = s.page_block_size;
    p.has_topk_length = s.topk_length != "none";
    p.topk_length_per_token = s.topk_length == "token";
    p.has_attn_sink = s.attn_sink;
    p.has_extra = s.extra_topk > 0;
    p.extra_topk = s.extra_topk;
    p.extra_page_block_size = p.has_extra ? s.extra_page_block_size : 0;
    if (p.has_extra) {
      p.extra_format = caches.extra_format;
      p.extra_kv_layout = caches.extra_kv_layout;
    }
    p.has_extra_topk_length = p.has_extra && s.extra_topk_length != "none";
    p.extra_topk_length_per_token = p.has_extra && s.extra_topk_length == "token";
    std::cout << "decode " << s.caches.format << " "
              << kv_layout_name(resolve_kv_layout(format, p.kv_layout)) << " b=" << p.b
              << " s_q=" << p.s_q << " h_q=" << p.h_q << " d_qk=" << p.d_qk << " d_v=" << p.d_v
              << " topk=" << p.topk << " page_block_size=" << p.page_block_size;
    if (p.has_extra) {
      const KvCacheFormat extra = p.extra_format.value_or(format);
      std::cout << " extra_format=" << kv_cache_format_name(extra) << " extra_kv_layout="
                << kv_layout_name(resolve_kv_layout(extra, p.extra_kv_layout))
                << " extra_topk=" << p.extra_topk
                << " extra_page_block_size=" << p.extra_page_block_size;
    }
    std::cout << (p.has_attn_sink ? " attn_sink" : "")
              << (p.has_topk_length ? " topk_length=" + s.topk_length : "") << "\n";
    if (Status st = validate_problem(p); !st.ok()) {
      refuse("decode", st);
    } else {
      print_kernels("decode kernels:", p, list_decode_kernels);
      print_plans(p);
    }
  }
  return exit_code;
}

}  // namespace sparse_mla::cli
