// Plain-text tables and number formatting (table.h).
#include "table.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

namespace sparse_mla::cli {

namespace {
bool looks_numeric(const std::string& s) {
  return !s.empty() &&
         (std::isdigit(static_cast<unsigned char>(s[0])) ||
          (s[0] == '-' && s.size() > 1 && std::isdigit(static_cast<unsigned char>(s[1]))));
}

// Display width: UTF-8 continuation bytes take no column.
size_t width(const std::string& s) {
  size_t w = 0;
  for (unsigned char c : s) w += (c & 0xC0) != 0x80;
  return w;
}

std::string fixed(double value, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, value);
  return buf;
}

// Three significant digits, as the anchors in docs/flashmla_baseline.md are written.
std::string three_digits(double v) {
  int digits = v >= 100 ? 0 : (v >= 10 ? 1 : 2);
  return fixed(v, digits);
}
}  // namespace

void Table::print(std::ostream& os) const {
  std::vector<size_t> widths(headers_.size());
  for (size_t c = 0; c < headers_.size(); ++c) widths[c] = width(headers_[c]);
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size() && c < widths.size(); ++c) {
      widths[c] = std::max(widths[c], width(row[c]));
    }
  }
  auto emit = [&](const std::vector<std::string>& cells, bool header) {
    std::string line;
    for (size_t c = 0; c < widths.size(); ++c) {
      const std::string cell = c < cells.size() ? cells[c] : "";
      std::string pad(widths[c] - width(cell), ' ');
      bool right = !header && looks_numeric(cell);
      line += right ? pad + cell : cell + pad;
      if (c + 1 < widths.size()) line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    os << line << "\n";
  };
  emit(headers_, true);
  size_t total = 0;
  for (size_t w : widths) total += w + 2;
  os << std::string(total > 2 ? total - 2 : 0, '-') << "\n";
  for (const auto& row : rows_) emit(row, false);
}

std::string format_fixed(double value, int digits) { return fixed(value, digits); }

std::string format_time_ms(double ms) {
  if (!std::isfinite(ms)) return "-";
  if (ms < 1.0) return three_digits(ms * 1e3) + " us";
  if (ms < 1e3) return three_digits(ms) + " ms";
  return three_digits(ms / 1e3) + " s";
}

std::string format_rate(double per_s, const char* unit) {
  if (!std::isfinite(per_s)) return "-";
  static const char* const kPrefixes[] = {"", "K", "M", "G", "T", "P"};
  int p = 0;
  while (per_s >= 1000.0 && p < 5) {
    per_s /= 1000.0;
    ++p;
  }
  return three_digits(per_s) + " " + kPrefixes[p] + unit;
}

std::string format_percent(double fraction) {
  if (!std::isfinite(fraction)) return "-";
  return format_fixed(fraction * 100.0, fraction < 0.1 ? 2 : 1) + "%";
}

}  // namespace sparse_mla::cli
