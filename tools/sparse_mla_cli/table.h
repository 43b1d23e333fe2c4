// Plain-text tables and number formatting for the CLI's terminal output (JSON output keeps raw
// numbers; these strings are for people).
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace sparse_mla::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}
  void add_row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  // Columns padded to their widest cell, two spaces apart; text left-aligned, numbers right.
  void print(std::ostream& os) const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

std::string format_time_ms(double ms);                    // "20.1 us", "4.14 ms", "1.23 s"
std::string format_rate(double per_s, const char* unit);  // "657 T" + unit, "3.04 G" + unit
std::string format_fixed(double value, int digits);       // fixed-point with `digits` decimals
std::string format_percent(double fraction);              // 0.314 -> "31.4%"

}  // namespace sparse_mla::cli
