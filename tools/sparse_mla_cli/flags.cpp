// Flag declaration, parsing and usage text for the `sparse-mla` sub-commands (see flags.h).
#include "flags.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace sparse_mla::cli {

std::optional<int64_t> parse_int(const std::string& text) {
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0') return std::nullopt;
  return static_cast<int64_t>(v);
}

std::optional<double> parse_double(const std::string& text) {
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || *end != '\0' || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::string shell_join(const std::vector<std::string>& words) {
  std::string line;
  for (const std::string& w : words) {
    if (!line.empty()) line += ' ';
    bool plain = !w.empty() && w.find_first_not_of(
                                   "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                   "0123456789-_=./,:+") == std::string::npos;
    if (plain) {
      line += w;
      continue;
    }
    line += '\'';
    for (char c : w) line += c == '\'' ? std::string("'\\''") : std::string(1, c);
    line += '\'';
  }
  return line;
}

void FlagSet::add(const std::string& name, Flag flag) {
  order_.push_back(name);
  flags_[name] = std::move(flag);
}

void FlagSet::add_int(const std::string& name, int64_t* value, std::string help, int64_t min,
                      int64_t max) {
  Flag f;
  f.help = std::move(help);
  f.default_text = std::to_string(*value);
  f.assign = [name, value, min, max](const std::string& text) -> Status {
    std::optional<int64_t> v = parse_int(text);
    if (!v) return invalid_argument("--" + name + " = '" + text + "' is not an integer");
    if (*v < min || *v > max) {
      return invalid_argument("--" + name + " = " + text + " is out of range [" +
                              std::to_string(min) + ", " + std::to_string(max) + "]");
    }
    *value = *v;
    return {};
  };
  add(name, std::move(f));
}

void FlagSet::add_double(const std::string& name, double* value, std::string help, double min,
                         double max) {
  Flag f;
  f.help = std::move(help);
  std::ostringstream d;
  d << *value;
  f.default_text = d.str();
  f.assign = [name, value, min, max](const std::string& text) -> Status {
    std::optional<double> v = parse_double(text);
    if (!v) return invalid_argument("--" + name + " = '" + text + "' is not a number");
    if (*v < min || *v > max) {
      std::ostringstream os;
      os << "--" << name << " = " << text << " is out of range [" << min << ", " << max << "]";
      return invalid_argument(os.str());
    }
    *value = *v;
    return {};
  };
  add(name, std::move(f));
}

void FlagSet::add_string(const std::string& name, std::string* value, std::string help,
                         std::vector<std::string> choices) {
  Flag f;
  f.help = std::move(help);
  if (!choices.empty()) {
    f.help += " (";
    for (size_t i = 0; i < choices.size(); ++i) f.help += (i ? "|" : "") + choices[i];
    f.help += ")";
  }
  f.default_text = value->empty() ? "" : *value;
  f.assign = [name, value, choices](const std::string& text) -> Status {
    if (!choices.empty()) {
      bool known = false;
      for (const std::string& c : choices) known = known || c == text;
      if (!known) {
        std::string list;
        for (size_t i = 0; i < choices.size(); ++i) list += (i ? ", " : "") + choices[i];
        return invalid_argument("--" + name + " = '" + text + "' is not one of: " + list);
      }
    }
    *value = text;
    return {};
  };
  add(name, std::move(f));
}

void FlagSet::add_path(const std::string& name, std::string* value, std::string help) {
  add_string(name, value, std::move(help));
  auto assign = flags_.at(name).assign;
  flags_.at(name).assign = [name, assign](const std::string& text) -> Status {
    if (text.empty()) return invalid_argument("--" + name + " needs a file name, got ''");
    return assign(text);
  };
}

void FlagSet::add_switch(const std::string& name, bool* value, std::string help) {
  Flag f;
  f.help = std::move(help);
  f.is_switch = true;
  f.assign = [value](const std::string&) -> Status {
    *value = true;
    return {};
  };
  add(name, std::move(f));
}

void FlagSet::set_default_text(const std::string& name, std::string text) {
  flags_.at(name).default_text = std::move(text);
}

Status FlagSet::parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      help_requested_ = true;
      continue;
    }
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
      return invalid_argument("unexpected argument '" + arg + "' (flags look like --name value)");
    }
    std::string name = arg.substr(2);
    std::optional<std::string> value;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    auto it = flags_.find(name);
    if (it == flags_.end()) {
      return invalid_argument("unknown flag --" + name + " (see `sparse-mla " + command_ +
                              " --help`)");
    }
    if (it->second.is_switch) {
      if (value) return invalid_argument("--" + name + " takes no value, got '" + *value + "'");
      value = "";
    } else if (!value) {
      if (i + 1 >= args.size()) return invalid_argument("--" + name + " needs a value");
      value = args[++i];
    }
    SMLA_RETURN_IF_ERROR(it->second.assign(*value));
    set_.insert(name);
  }
  return {};
}

std::string FlagSet::usage() const {
  std::ostringstream os;
  os << "flags of `sparse-mla " << command_ << "`:\n";
  for (const std::string& name : order_) {
    const Flag& f = flags_.at(name);
    std::string head = "  --" + name + (f.is_switch ? "" : " V");
    os << head;
    // Help text in a column; a longer flag gets two spaces.
    for (size_t pad = head.size(); pad < 30; ++pad) os << ' ';
    if (head.size() >= 30) os << "  ";
    os << f.help;
    if (!f.is_switch && !f.default_text.empty()) os << " [" << f.default_text << "]";
    os << "\n";
  }
  return os.str();
}

}  // namespace sparse_mla::cli
