// kd::CheckPickleBounds (base/torch_archive.h): every length and memo id of a pickle checked
// against what is left, before libtorch's unpickler reads it.
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/internal/le_reader.h"
#include "base/torch_archive.h"

namespace kd {
namespace {

using base_internal::Reader;

absl::Status Invalid(absl::string_view message) { return absl::InvalidArgumentError(message); }

// How an opcode's argument is laid out.
enum class Arg { kNone, kFixed, kLine, kTwoLines, kLength, kInvalid };
struct OpInfo {
  Arg arg = Arg::kInvalid;
  int width = 0;  // kFixed: the argument's bytes; kLength: the length field's bytes
};

OpInfo Opcode(unsigned char op) {
  switch (op) {
    // No argument.
    case '(':
    case '.':
    case '0':
    case '1':
    case '2':
    case 'N':
    case 'Q':
    case 'R':
    case 'a':
    case 'b':
    case 'd':
    case '}':
    case 'e':
    case 'l':
    case ']':
    case 'o':
    case 's':
    case 't':
    case ')':
    case 'u':
    case 0x81:
    case 0x85:
    case 0x86:
    case 0x87:
    case 0x88:
    case 0x89:
    case 0x8f:
    case 0x90:
    case 0x91:
    case 0x92:
    case 0x93:
    case 0x94:
    case 0x97:
    case 0x98:
      return {Arg::kNone, 0};
    // A newline-terminated argument (two for GLOBAL and INST).
    case 'I':
    case 'L':
    case 'S':
    case 'V':
    case 'F':
    case 'g':
    case 'p':
    case 'P':
      return {Arg::kLine, 0};
    case 'c':
    case 'i':
      return {Arg::kTwoLines, 0};
    // Fixed-size arguments.
    case 'K':
    case 'h':
    case 'q':
    case 0x80:
    case 0x82:
      return {Arg::kFixed, 1};
    case 'M':
    case 0x83:
      return {Arg::kFixed, 2};
    case 'J':
    case 'j':
    case 'r':
    case 0x84:
      return {Arg::kFixed, 4};
    case 'G':
      return {Arg::kFixed, 8};
    // A length, then that many bytes.
    case 'U':
    case 'C':
    case 0x8c:
    case 0x8a:
      return {Arg::kLength, 1};
    case 'T':
    case 'X':
    case 'B':
    case 0x8b:
      return {Arg::kLength, 4};
    case 0x8d:
    case 0x8e:
    case 0x96:
      return {Arg::kLength, 8};
    case 0x95:  // FRAME: an 8-byte length of the frame that follows (checked like the rest)
      return {Arg::kFixed, 8};
    default:
      return {};
  }
}

}  // namespace

absl::Status CheckPickleBounds(absl::string_view pickle) {
  const Reader r(pickle);
  uint64_t p = 0;
  // Memo ids: picklers number them 0, 1, 2, ...; libtorch's unpickler grows its memo table to
  // the id it is given (LONG_BINPUT 1,400,000,000 asked for 22 GB; found by
  // //fuzz:checkpoint_fuzzer), so an id past the next one is damage.
  uint64_t memo_size = 0;
  while (p < pickle.size()) {
    const unsigned char op = static_cast<unsigned char>(pickle[p]);
    const OpInfo info = Opcode(op);
    const uint64_t at = p++;
    auto bad = [&](absl::string_view what) {
      return Invalid(
          absl::StrFormat("a damaged pickle: opcode 0x%02x at offset %d %s", op, at, what));
    };
    switch (info.arg) {
      case Arg::kInvalid:
        return bad("is not a pickle opcode");
      case Arg::kNone:
        if (op == '.') return absl::OkStatus();  // STOP
        if (op == 0x94) ++memo_size;             // MEMOIZE
        break;
      case Arg::kFixed:
        if (!r.Has(p, info.width)) return bad("runs past the end");
        if (op == 'q' || op == 'r') {  // BINPUT, LONG_BINPUT
          const uint64_t id = r.Le(p, info.width);
          if (id > memo_size) {
            return bad(absl::StrCat("stores memo id ", id, " where the next is ", memo_size));
          }
          memo_size = std::max(memo_size, id + 1);
        }
        p += info.width;
        break;
      case Arg::kLine:
      case Arg::kTwoLines: {
        const uint64_t start = p;
        for (int line = 0; line < (info.arg == Arg::kLine ? 1 : 2); ++line) {
          const size_t newline = pickle.find('\n', p);
          if (newline == absl::string_view::npos) return bad("has no end of line");
          p = newline + 1;
        }
        if (op == 'p') {  // PUT: a decimal memo id
          uint64_t id = 0;
          if (!absl::SimpleAtoi(pickle.substr(start, p - 1 - start), &id) || id > memo_size) {
            return bad(absl::StrCat("stores a memo id past the next, ", memo_size));
          }
          memo_size = std::max(memo_size, id + 1);
        }
        break;
      }
      case Arg::kLength: {
        if (!r.Has(p, info.width)) return bad("runs past the end");
        const uint64_t length = r.Le(p, info.width);
        p += info.width;
        if (!r.Has(p, length)) {
          return bad(absl::StrCat("gives a length of ", length, " bytes where ", pickle.size() - p,
                                  " are left"));
        }
        p += length;
        break;
      }
    }
  }
  return Invalid("a damaged pickle: it ends without a STOP opcode");
}

}  // namespace kd
