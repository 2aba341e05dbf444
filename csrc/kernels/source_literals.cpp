#include "kernels/source_literals.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>

namespace lazyfuse {
namespace {

bool IsIdentifierChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

bool IsIdentifier(const std::string& word) {
  if (word.empty() || std::isdigit(static_cast<unsigned char>(word[0]))) {
    return false;
  }
  for (char c : word) {
    if (!IsIdentifierChar(c) && c != ':') {
      return false;
    }
  }
  return true;
}

// Whether the '[' ending `line_before` opens an array declaration
// ("__shared__ float lf_row[", "lf_half e["), whose size must stay a
// constant, rather than an index ("x = lf_partials[").
bool DeclaresArray(const std::string& line_before) {
  const size_t cut = line_before.find_last_of(";{}");
  const std::string segment = cut == std::string::npos ? line_before : line_before.substr(cut + 1);
  std::vector<std::string> words;
  std::string word;
  for (char c : segment + " ") {
    if (std::isspace(static_cast<unsigned char>(c))) {
      if (!word.empty()) {
        words.push_back(word);
      }
      word.clear();
    } else {
      word += c;
    }
  }
  if (words.size() < 2) {
    return false;
  }
  for (const std::string& w : words) {
    if (!IsIdentifier(w) && w.rfind("alignas(", 0) != 0) {
      return false;
    }
  }
  const std::string& first = words.front();
  return first != "return" && first != "else" && first != "case" && first != "do";
}

// The type of the numeric literal `text`, or false when it is one a template
// keeps as written (hex, octal, long double, out of range).
bool ClassifyLiteral(const std::string& text, LiteralType* type) {
  size_t digits_end = 0;
  bool floating = false;
  while (digits_end < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[digits_end])) || text[digits_end] == '.' ||
          text[digits_end] == 'e' || text[digits_end] == 'E' ||
          ((text[digits_end] == '+' || text[digits_end] == '-') && digits_end > 0 &&
           (text[digits_end - 1] == 'e' || text[digits_end - 1] == 'E')))) {
    floating = floating || !std::isdigit(static_cast<unsigned char>(text[digits_end]));
    ++digits_end;
  }
  std::string suffix = text.substr(digits_end);
  for (char& c : suffix) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  const std::string digits = text.substr(0, digits_end);
  if (floating) {
    if (suffix == "f") {
      *type = LiteralType::kFloat;
      return true;
    }
    *type = LiteralType::kDouble;
    return suffix.empty();
  }
  if (digits.size() > 1 && digits[0] == '0') {
    return false;  // octal
  }
  errno = 0;
  const unsigned long long value = std::strtoull(digits.c_str(), nullptr, 10);
  if (errno != 0) {
    return false;
  }
  if (suffix.empty()) {
    *type = value <= static_cast<unsigned long long>(INT_MAX) ? LiteralType::kInt
                                                              : LiteralType::kLongLong;
    return value <= static_cast<unsigned long long>(LLONG_MAX);
  }
  if (suffix == "ll" || suffix == "l") {
    *type = LiteralType::kLongLong;
    return value <= static_cast<unsigned long long>(LLONG_MAX);
  }
  if (suffix == "u") {
    *type = LiteralType::kUnsigned;
    return value <= UINT_MAX;
  }
  if (suffix == "ull" || suffix == "llu" || suffix == "ul" || suffix == "lu") {
    *type = LiteralType::kUnsignedLongLong;
    return true;
  }
  return false;
}

// Whether the line before the one at `line_start` is "#pragma unroll".
bool FollowsUnrollPragma(const std::string& source, size_t line_start) {
  if (line_start < 2) {
    return false;
  }
  const size_t previous_end = line_start - 1;
  const size_t previous_start = source.rfind('\n', previous_end - 1);
  const size_t begin = source.find_first_not_of(" \t", previous_start + 1);
  const std::string pragma = "#pragma unroll";
  return begin != std::string::npos && previous_end >= begin &&
         source.compare(begin, previous_end - begin, pragma) == 0;
}

size_t KernelStart(const std::string& source, const std::string& kernel_name) {
  const size_t header = source.rfind("void " + kernel_name + "(");
  TORCH_CHECK(
      header != std::string::npos, "lazyfuse: kernel source has no kernel named ", kernel_name);
  const size_t line = source.rfind('\n', header);
  return line == std::string::npos ? 0 : line + 1;
}

}  // namespace

const char* LiteralTypeName(LiteralType type) {
  switch (type) {
    case LiteralType::kInt:
      return "int";
    case LiteralType::kLongLong:
      return "long long";
    case LiteralType::kUnsigned:
      return "unsigned int";
    case LiteralType::kUnsignedLongLong:
      return "unsigned long long";
    case LiteralType::kFloat:
      return "float";
    case LiteralType::kDouble:
      return "double";
  }
  return "int";
}

SourceShape ScanLiterals(const std::string& source, const std::string& kernel_name) {
  SourceShape shape;
  size_t i = KernelStart(source, kernel_name);
  // The prelude is the dialect's, the same for all its kernels: the first
  // line, which names the dialect, stands for it.
  const size_t first_line = std::min(source.find('\n'), i);
  shape.skeleton.reserve(source.size() - i + first_line + 1);
  shape.skeleton.append(source, 0, first_line);
  shape.skeleton += '\n';
  size_t line_start = i;
  std::vector<bool> brackets;  // per open '[' on this line: a declaration's
  while (i < source.size()) {
    const char c = source[i];
    const char next = i + 1 < source.size() ? source[i + 1] : '\0';
    // Comments, preprocessor lines and character or string literals are
    // copied as they are.
    const bool line_comment = c == '/' && next == '/';
    const bool directive = c == '#' && source.find_first_not_of(" \t", line_start) == i;
    // The loop after "#pragma unroll" walks vector lanes, whose count must
    // stay a constant for the loop to unroll into registers.
    const bool unrolled_loop = i == line_start && FollowsUnrollPragma(source, line_start);
    // A constexpr is a strategy constant (a vector loop's lane count): the
    // loop's registers and unrolling are built on it.
    const bool strategy_constant = c == 'c' && source.find_first_not_of(" \t", line_start) == i &&
                                   source.compare(i, 10, "constexpr ") == 0;
    if (line_comment || directive || unrolled_loop || strategy_constant) {
      const size_t end = std::min(source.find('\n', i), source.size());
      shape.skeleton.append(source, i, end - i);
      i = end;
      continue;
    }
    if (c == '/' && next == '*') {
      const size_t close = source.find("*/", i + 2);
      const size_t end = close == std::string::npos ? source.size() : close + 2;
      shape.skeleton.append(source, i, end - i);
      i = end;
      continue;
    }
    if (c == '"' || c == '\'') {
      size_t end = i + 1;
      while (end < source.size() && source[end] != c) {
        end += source[end] == '\\' ? 2 : 1;
      }
      end = std::min(end + 1, source.size());
      shape.skeleton.append(source, i, end - i);
      i = end;
      continue;
    }
    if (c == '\n') {
      line_start = i + 1;
      brackets.clear();
    } else if (c == '[') {
      brackets.push_back(DeclaresArray(source.substr(line_start, i - line_start)));
    } else if (c == ']' && !brackets.empty()) {
      brackets.pop_back();
    }
    const bool starts_number =
        (std::isdigit(static_cast<unsigned char>(c)) ||
         (c == '.' && std::isdigit(static_cast<unsigned char>(next)))) &&
        (i == 0 || (!IsIdentifierChar(source[i - 1]) && source[i - 1] != '.'));
    if (!starts_number) {
      shape.skeleton += c;
      ++i;
      continue;
    }
    size_t end = i;
    while (end < source.size() && (IsIdentifierChar(source[end]) || source[end] == '.' ||
                                   ((source[end] == '+' || source[end] == '-') &&
                                    (source[end - 1] == 'e' || source[end - 1] == 'E') &&
                                    !(source[i] == '0' && i + 1 < source.size() &&
                                      (source[i + 1] == 'x' || source[i + 1] == 'X'))))) {
      ++end;
    }
    SourceLiteral literal;
    literal.begin = i;
    literal.end = end;
    literal.text = source.substr(i, end - i);
    const bool fixed = std::find(brackets.begin(), brackets.end(), true) != brackets.end();
    if (!fixed && ClassifyLiteral(literal.text, &literal.type)) {
      shape.skeleton += '\x01';
      shape.skeleton += static_cast<char>('0' + static_cast<int>(literal.type));
      shape.literals.push_back(std::move(literal));
    } else {
      shape.skeleton.append(literal.text);
    }
    i = end;
  }
  return shape;
}

std::string GenericSource(const std::string& source,
                          const std::string& kernel_name,
                          const SourceShape& shape,
                          const std::vector<bool>& generic,
                          std::vector<std::string>* types) {
  TORCH_CHECK(generic.size() == shape.literals.size(),
              "lazyfuse: a generic kernel names ",
              generic.size(),
              " literals of ",
              shape.literals.size());
  std::string text;
  text.reserve(source.size());
  size_t copied = 0;
  std::string parameters;
  int next = 0;
  for (size_t k = 0; k < shape.literals.size(); ++k) {
    if (!generic[k]) {
      continue;
    }
    const SourceLiteral& literal = shape.literals[k];
    const std::string name = "lf_g" + std::to_string(next++);
    text.append(source, copied, literal.begin - copied);
    text += name;
    copied = literal.end;
    types->push_back(LiteralTypeName(literal.type));
    parameters += ", " + types->back() + " " + name;
  }
  text.append(source, copied, std::string::npos);
  const size_t header = text.rfind("void " + kernel_name + "(");
  const size_t close = text.find(')', header);
  TORCH_CHECK(header != std::string::npos && close != std::string::npos,
              "lazyfuse: kernel ",
              kernel_name,
              " has no parameter list");
  text.insert(close, parameters);
  return text;
}

}  // namespace lazyfuse
