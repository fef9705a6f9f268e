// Rule lists of the daemon's test hooks (-o fault_eio=, -o shape=):
// "A:B:C/D:E", rules separated by '/' (libfuse splits -o at commas),
// fields by ':'.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace kvfs {

struct Rule {
  std::string text;                 // "A:B:C", for messages
  std::vector<std::string> fields;  // {"A", "B", "C"}
};

// Every rule of `spec` in order; "" is one empty rule.
std::vector<Rule> SplitRules(const std::string& spec);

// EINVAL "HOOK: rule 'TEXT': WHY (want FORMAT)".
Status BadRule(const char* hook, const Rule& rule, const std::string& why, const char* format);

// A field as a whole number: decimal, or hex after 0x with `hex`. False
// for anything else (empty, a sign, a suffix, out of range).
bool ParseRuleNumber(const std::string& field, uint64_t* out, bool hex = false);

}  // namespace kvfs
