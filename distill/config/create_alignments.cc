#include "distill/config/create_alignments.h"

#include <cctype>
#include <optional>
#include <regex>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kd {
namespace {

std::string Field(int entry) {
  return absl::StrCat("feature_distillation.create_alignments[", entry, "]");
}

// `pattern` compiled, or why not.
std::optional<std::regex> Compile(const std::string& pattern, std::string* error) {
  try {
    return std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    *error = absl::StrCat("\"", pattern, "\" is not a regular expression (", e.what(),
                          "; ECMAScript syntax: Python's (?P<name>...) groups and look-behinds "
                          "are not supported)");
    return std::nullopt;
  }
}

// Whether silverspoon-kd substitutes `replacement` (it contains \1 .. \9).
bool RefersToGroups(const std::string& replacement) {
  for (char d = '1'; d <= '9'; ++d) {
    if (absl::StrContains(replacement, std::string{'\\', d})) return true;
  }
  return false;
}

// A re.sub template as std::regex_replace's format (\1 and \g<1> -> $1, \\ -> \, $ -> $$,
// Python's character escapes as their characters, other escapes kept with their backslash as
// re.sub keeps them); nullopt with `error` for what re.sub refuses.
std::optional<std::string> Template(const std::string& replacement, std::string* error) {
  std::string out;
  for (size_t i = 0; i < replacement.size(); ++i) {
    const char c = replacement[i];
    if (c == '$') {
      out += "$$";
      continue;
    }
    if (c != '\\' || i + 1 == replacement.size()) {
      out += c;
      continue;
    }
    const char next = replacement[++i];
    if (std::isdigit(static_cast<unsigned char>(next))) {
      out += '$';
      out += next;
      if (i + 1 < replacement.size() &&
          std::isdigit(static_cast<unsigned char>(replacement[i + 1]))) {
        out += replacement[++i];
      }
    } else if (next == 'g') {
      const size_t close = replacement.find('>', i);
      const std::string group =
          i + 1 < replacement.size() && replacement[i + 1] == '<' && close != std::string::npos
              ? replacement.substr(i + 2, close - i - 2)
              : "";
      if (group.empty() || !std::all_of(group.begin(), group.end(), [](char g) {
            return std::isdigit(static_cast<unsigned char>(g));
          })) {
        *error = absl::StrCat("\"", replacement,
                              "\": only numbered groups (\\g<1>) can be referred to (std::regex "
                              "has no named groups)");
        return std::nullopt;
      }
      absl::StrAppend(&out, "$", group);
      i = close;
    } else if (next == '\\') {
      out += '\\';
    } else if (const char* escape = std::strchr("abfnrtv", next);
               escape != nullptr && next != '\0') {
      out += "\a\b\f\n\r\t\v"[escape - "abfnrtv"];
    } else if (std::isalpha(static_cast<unsigned char>(next))) {
      *error = absl::StrCat("\"", replacement, "\": bad escape \\", std::string(1, next),
                            " (re.sub refuses it too)");
      return std::nullopt;
    } else {
      out += '\\';
      out += next;
    }
  }
  return out;
}

// The first of `paths` `pattern` is found in (get_modules_by_names(model, [pattern])[0]).
std::optional<std::string> FirstFound(const std::regex& pattern,
                                      const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    if (std::regex_search(path, pattern)) return path;
  }
  return std::nullopt;
}

AlignmentConfig MakeAlignment(const CreateAlignmentsConfig& entry, const std::string& teacher,
                              const std::string& student) {
  AlignmentConfig a;
  a.mutable_teacher()->set_path(teacher);
  a.mutable_student()->set_path(student);
  if (entry.has_output_selector_index()) {
    a.mutable_teacher()->set_element(entry.output_selector_index());
    a.mutable_student()->set_element(entry.output_selector_index());
  }
  a.set_loss(entry.loss());
  *a.mutable_loss_kwargs() = entry.loss_kwargs();
  if (entry.has_auto_projector()) a.set_auto_projector(entry.auto_projector());
  return a;
}

}  // namespace

std::vector<std::string> CreateAlignmentsErrors(const FeatureDistillationConfig& config) {
  std::vector<std::string> errors;
  for (int i = 0; i < config.create_alignments_size(); ++i) {
    const CreateAlignmentsConfig& entry = config.create_alignments(i);
    const std::string field = Field(i);
    if (entry.modules().empty() == entry.module_map().empty()) {
      errors.push_back(
          absl::StrCat(field,
                       ": give `modules` (patterns found in both models' module paths) or "
                       "`module_map` (teacher pattern -> student replacement), one of them"));
    }
    std::string error;
    for (int j = 0; j < entry.modules_size(); ++j) {
      if (!Compile(entry.modules(j), &error)) {
        errors.push_back(absl::StrCat(field, ".modules[", j, "]: ", error));
      }
    }
    for (int j = 0; j < entry.module_map_size(); ++j) {
      const ModulePatternPair& pair = entry.module_map(j);
      const std::string at = absl::StrCat(field, ".module_map[", j, "]");
      if (!Compile(pair.teacher(), &error)) errors.push_back(absl::StrCat(at, ".teacher: ", error));
      if (pair.student().empty()) {
        errors.push_back(absl::StrCat(at,
                                      ".student: required (a pattern, or a replacement "
                                      "referring to the teacher pattern's groups as \\1)"));
      } else if (RefersToGroups(pair.student()) ? !Template(pair.student(), &error)
                                                : !Compile(pair.student(), &error)) {
        errors.push_back(absl::StrCat(at, ".student: ", error));
      }
    }
  }
  return errors;
}

absl::StatusOr<FeatureDistillationConfig> CreateAlignments(
    const FeatureDistillationConfig& config, const std::vector<std::string>& teacher_paths,
    const std::vector<std::string>& student_paths) {
  if (const std::vector<std::string> errors = CreateAlignmentsErrors(config); !errors.empty()) {
    return absl::InvalidArgumentError(absl::StrJoin(errors, "; "));
  }
  FeatureDistillationConfig out = config;
  out.clear_create_alignments();
  std::string error;
  auto student_for = [&](const std::string& field,
                         const std::string& pattern) -> absl::StatusOr<std::string> {
    std::optional<std::regex> compiled = Compile(pattern, &error);
    if (!compiled) return absl::InvalidArgumentError(absl::StrCat(field, ": ", error));
    std::optional<std::string> found = FirstFound(*compiled, student_paths);
    if (!found) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": no student module path has \"", pattern,
                       "\" in it (as silverspoon-kd's create_alignments, the pattern is searched "
                       "anywhere in the student's module paths)"));
    }
    return *found;
  };
  for (int i = 0; i < config.create_alignments_size(); ++i) {
    const CreateAlignmentsConfig& entry = config.create_alignments(i);
    const std::string field = Field(i);
    const size_t before = out.alignments_size();
    if (!entry.modules().empty()) {
      std::vector<std::regex> patterns;
      for (const std::string& m : entry.modules()) patterns.push_back(*Compile(m, &error));
      for (const std::string& teacher : teacher_paths) {
        if (std::none_of(patterns.begin(), patterns.end(),
                         [&](const std::regex& p) { return std::regex_search(teacher, p); })) {
          continue;
        }
        absl::StatusOr<std::string> student = student_for(
            absl::StrCat(field, ".modules (teacher module \"", teacher, "\")"), teacher);
        if (!student.ok()) return student.status();
        *out.add_alignments() = MakeAlignment(entry, teacher, *student);
      }
    }
    for (int j = 0; j < entry.module_map_size(); ++j) {
      const ModulePatternPair& pair = entry.module_map(j);
      const std::string at = absl::StrCat(field, ".module_map[", j, "]");
      const std::regex teacher_pattern = *Compile(pair.teacher(), &error);
      const std::optional<std::string> format =
          RefersToGroups(pair.student()) ? Template(pair.student(), &error) : std::nullopt;
      bool found = false;
      for (const std::string& teacher : teacher_paths) {
        if (!std::regex_search(teacher, teacher_pattern)) continue;
        found = true;
        const std::string student_pattern =
            format ? std::regex_replace(teacher, teacher_pattern, *format) : pair.student();
        absl::StatusOr<std::string> student = student_for(
            absl::StrCat(at, ".student (for teacher module \"", teacher, "\")"), student_pattern);
        if (!student.ok()) return student.status();
        *out.add_alignments() = MakeAlignment(entry, teacher, *student);
      }
      if (!found) {
        return absl::InvalidArgumentError(absl::StrCat(
            at, ".teacher: no teacher module path has \"", pair.teacher(),
            "\" in it; the teacher's modules include ",
            absl::StrJoin(
                teacher_paths.begin(),
                teacher_paths.begin() + std::min<size_t>(8, teacher_paths.size()), ", ",
                [](std::string* o, const std::string& p) { absl::StrAppend(o, "\"", p, "\""); })));
      }
    }
    if (out.alignments_size() == static_cast<int>(before)) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".modules: no teacher module path has any of \"",
          absl::StrJoin(entry.modules(), "\", \""), "\" in it (searched anywhere in the path)"));
    }
  }
  return out;
}

}  // namespace kd
