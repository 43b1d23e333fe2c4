// Isolated-call timing (`sparse-mla bench --timing isolated`, docs/flashmla_baseline.md "How to
// time"): the host time one call costs, which runs queued back to back behind the L2-flush fill
// hide, and the device time of the same call without host time in it.
#pragma once

#include <functional>
#include <vector>

#include "sparse_mla/status.h"
#include "sparse_mla/tensor_view.h"

namespace sparse_mla::cli {

// Runs `fn` `warmup` times, then `iterations` times one call at a time, and fills
//   host_ms    the host wall of each call, from the API call to its return, the device idle
//              (synchronised) before it;
//   device_ms  the device time of each call: CUDA events around it, with the L2 flushed first
//              (when `flush_l2`) and the call's launches held behind a host gate until the call
//              has returned, so that no host time is in the events.
// On CUDA the two are measured in two passes of `iterations` calls each (host, then device). On
// the CPU the call does its work before it returns: device_ms is the wall time, = host_ms.
// Fails (kUnsupported) on CUDA when a call synchronises the device itself: its launches cannot
// be held behind the gate.
Status time_isolated_calls(Device device, const std::function<Status()>& fn, int warmup,
                           int iterations, bool flush_l2, std::vector<double>* host_ms,
                           std::vector<double>* device_ms);

}  // namespace sparse_mla::cli
