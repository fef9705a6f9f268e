#include "common/rule_list.h"

#include <cerrno>
#include <cstdlib>

namespace kvfs {

std::vector<Rule> SplitRules(const std::string& spec) {
  std::vector<Rule> rules;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t end = spec.find('/', start);
    if (end == std::string::npos) end = spec.size();
    Rule r;
    r.text = spec.substr(start, end - start);
    for (size_t a = 0;;) {
      size_t b = r.text.find(':', a);
      r.fields.push_back(r.text.substr(a, b == std::string::npos ? std::string::npos : b - a));
      if (b == std::string::npos) break;
      a = b + 1;
    }
    rules.push_back(std::move(r));
    start = end + 1;
  }
  return rules;
}

Status BadRule(const char* hook, const Rule& rule, const std::string& why, const char* format) {
  return Status::Error(EINVAL, std::string(hook) + ": rule '" + rule.text + "': " + why +
                                   " (want " + format + ")");
}

bool ParseRuleNumber(const std::string& field, uint64_t* out, bool hex) {
  if (field.empty() || field[0] < '0' || field[0] > '9') return false;
  char* e = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(field.c_str(), &e, hex ? 0 : 10);
  if (*e != '\0' || errno != 0) return false;
  *out = v;
  return true;
}

}  // namespace kvfs
