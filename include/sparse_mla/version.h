// Library version.
#pragma once

#define SMLA_VERSION_MAJOR 0
#define SMLA_VERSION_MINOR 1
#define SMLA_VERSION_PATCH 0

namespace sparse_mla {
const char* version_string();  // "0.1.0"
}  // namespace sparse_mla
