#include "bench/row_json.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <variant>

namespace rcoll::bench {
namespace {

// A value inside a row or at the top level: the format has no others there.
using Scalar = std::variant<std::monostate, std::string, double>;  // monostate: true, false or null

class Parser {
 public:
  Parser(std::string text, std::string path) : text_(std::move(text)), path_(std::move(path)) {}

  RowFile file() {
    RowFile out;
    skip_space();
    if (pos_ == text_.size())
      throw std::runtime_error(path_ + ": the file is empty (not rcoll-bench's --json format)");
    bool have_rows = false;
    object([&](const std::string& key) {
      if (key == "rows") {
        have_rows = true;
        array([&] { out.rows.push_back(row()); });
      } else if (key == "ranks") {
        out.ranks = static_cast<int>(whole(scalar(), key));
      } else if (key == "time") {
        out.timing = text(scalar(), key);
      } else {
        scalar();
      }
    });
    skip_space();
    if (pos_ != text_.size()) fail("unexpected text after the top-level object");
    if (!have_rows) fail("no \"rows\" array");
    return out;
  }

 private:
  Row row() {
    Row r;
    int required = 0;  // of op, size, time_us, busbw
    const size_t start = pos_;
    object([&](const std::string& key) {
      const Scalar v = scalar();
      if (key == "op" || key == "size" || key == "time_us" || key == "busbw") ++required;
      // clang-format off
      if (key == "op") r.op = text(v, key);
      else if (key == "size") r.size = whole(v, key);
      else if (key == "count") r.count = whole(v, key);
      else if (key == "dtype") r.dtype = text(v, key);
      else if (key == "redop") r.redop = text(v, key);
      else if (key == "root") r.root = static_cast<int>(number(v, key));
      else if (key == "time_us") r.time_us = number(v, key);
      else if (key == "algbw") r.algbw = number(v, key);
      else if (key == "busbw") r.busbw = number(v, key);
      else if (key == "wrong") r.wrong = whole(v, key);
      else if (key == "transport") r.transport = text(v, key);
      else if (key == "algo") r.algo = text(v, key);
      else if (key == "library") r.library = text(v, key);
      else if (key == "steal_pct") r.steal_pct = number(v, key);
      // clang-format on
    });
    if (required != 4) {
      pos_ = start;
      fail("a row needs each of \"op\", \"size\", \"time_us\", \"busbw\" once");
    }
    return r;
  }

  // {"key": value, ...}; `member` reads the value after each key.
  template <typename F>
  void object(F&& member) {
    expect('{');
    if (take('}')) return;
    do {
      const std::string key = string();
      expect(':');
      member(key);
    } while (take(','));
    if (!take('}')) fail("expected ',' or '}'");
  }

  template <typename F>
  void array(F&& element) {
    expect('[');
    if (take(']')) return;
    do element();
    while (take(','));
    if (!take(']')) fail("expected ',' or ']'");
  }

  Scalar scalar() {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == '"') return string();
    for (const char* word : {"true", "false", "null"}) {
      if (text_.compare(pos_, std::strlen(word), word) == 0) {
        pos_ += std::strlen(word);
        return std::monostate{};
      }
    }
    return number_literal();
  }

  // JSON's number grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
  double number_literal() {
    skip_space();
    const size_t start = pos_;
    auto digits = [&] {
      const size_t from = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      return pos_ - from;
    };
    take_raw('-');
    if (take_raw('0')) {
    } else if (digits() == 0) {
      pos_ = start;
      fail("expected a value (a string or a number)");
    }
    if (take_raw('.') && digits() == 0) fail("expected a digit after '.'");
    if (take_raw('e') || take_raw('E')) {
      if (!take_raw('+')) take_raw('-');
      if (digits() == 0) fail("expected a digit in the exponent");
    }
    return std::strtod(text_.substr(start, pos_ - start).c_str(), nullptr);
  }

  std::string string() {
    expect('"');
    std::string out;
    while (pos_ < text_.size() && text_[pos_] != '"') {
      const char c = text_[pos_++];
      if (static_cast<unsigned char>(c) < 0x20) fail("control character inside a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) break;
      const char e = text_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out += e;
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u':
          out += utf8(hex4());
          break;
        default:
          --pos_;
          fail("unknown escape in a string");
      }
    }
    if (!take_raw('"')) fail("unterminated string");
    return out;
  }

  unsigned hex4() {
    unsigned v = 0;
    for (int i = 0; i < 4; ++i, ++pos_) {
      const char c = pos_ < text_.size() ? text_[pos_] : '\0';
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) fail("expected 4 hex digits after \\u");
      v = v * 16 + static_cast<unsigned>(d);
    }
    return v;
  }

  // The writer escapes control characters only; other code points of the basic plane are kept as
  // they are.
  static std::string utf8(unsigned cp) {
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      s += static_cast<char>(0xE0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return s;
  }

  std::string text(const Scalar& v, const std::string& key) {
    if (const auto* s = std::get_if<std::string>(&v)) return *s;
    fail("\"" + key + "\" is not a string");
  }
  double number(const Scalar& v, const std::string& key) {
    if (const auto* d = std::get_if<double>(&v)) return *d;
    fail("\"" + key + "\" is not a number");
  }
  uint64_t whole(const Scalar& v, const std::string& key) {
    const double d = number(v, key);
    if (d < 0 || d != std::floor(d) || d > 9007199254740992.0)
      fail("\"" + key + "\" is not a whole number");
    return static_cast<uint64_t>(d);
  }

  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\r' || text_[pos_] == '\n')) {
      ++pos_;
    }
  }
  bool take_raw(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool take(char c) {
    skip_space();
    return take_raw(c);
  }
  void expect(char c) {
    if (!take(c)) fail(std::string("expected '") + c + "'");
  }

  [[noreturn]] void fail(const std::string& what) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    std::string where = pos_ >= text_.size()
                            ? "at the end"
                            : "line " + std::to_string(line) + ", column " + std::to_string(column);
    throw std::runtime_error(path_ + ": " + where + ": " + what +
                             " (not rcoll-bench's --json format)");
  }

  std::string text_;
  std::string path_;
  size_t pos_ = 0;
};

}  // namespace

RowFile read_row_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot read: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw std::runtime_error(path + ": cannot read: " + std::strerror(errno));
  return Parser(text.str(), path).file();
}

}  // namespace rcoll::bench
