// torchdistill 0.x's criterion rewritten as the 1.x criterion it stands for, which
// criterion_import.cc then imports.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/status_macros.h"
#include "distill/torchdistill/import_context.h"

namespace kd {
namespace torchdistill {
namespace {

using Kind = YamlValue::Kind;

// torchdistill 0.x's {type, params} of a loss as 1.x's {key, kwargs}.
std::shared_ptr<YamlValue> LossOf(const YamlValue& loss) {
  std::vector<std::pair<std::string, std::shared_ptr<const YamlValue>>> entries;
  for (const auto& [name, value] : loss.entries) {
    entries.emplace_back(name == "type" ? "key" : name == "params" ? "kwargs" : name, value);
  }
  return MadeMap(std::move(entries), loss);
}

// torchdistill 0.x's criterion ({type, org_term: {criterion: {type, params}, factor}, sub_terms:
// {NAME: {criterion: {type, params}, params: {input, target}, factor}}}) as 1.x's
// WeightedSumLoss: each sub-term's params its SimpleLossWrapper's kwargs and factor its weight;
// the org term a sub-term "org_term" on the models' outputs, as 0.x's boxes fed it (KDLoss: the
// student's and the teacher's outputs and the labels; another loss: the student's output and the
// labels), weighted by its factor.
}  // namespace

absl::StatusOr<std::shared_ptr<YamlValue>> ZeroXCriterionAsOneX(Context& context,
                                                                const YamlValue& criterion,
                                                                const std::string& what) {
  KD_ASSIGN_OR_RETURN(Keys keys, Keys::Of(&criterion, what));
  const YamlValue* type = keys.Take("type");
  const YamlValue* org = keys.Take("org_term");
  const YamlValue* subs = keys.Take("sub_terms");
  keys.Finish(context, "a torchdistill 0.x criterion has type, org_term and sub_terms");
  context.Note(*type, what, "torchdistill 0.x's form (type, org_term, sub_terms), taken as 1.x's");
  std::vector<std::pair<std::string, std::shared_ptr<const YamlValue>>> terms;
  if (subs != nullptr && subs->kind == Kind::kMap) {
    for (const auto& [name, term] : subs->entries) {
      if (term->kind != Kind::kMap) {
        return Context::WrongType(*term, what + ".sub_terms." + name, "a mapping");
      }
      std::vector<std::pair<std::string, std::shared_ptr<const YamlValue>>> entries;
      for (const auto& [key, value] : term->entries) {
        if (key == "criterion" && value->kind == Kind::kMap) {
          entries.emplace_back("criterion", LossOf(*value));
        } else if (key == "params") {
          entries.emplace_back(
              "criterion_wrapper",
              MadeMap({{"key", MadeString("SimpleLossWrapper", *value)}, {"kwargs", value}},
                      *value));
        } else {
          entries.emplace_back(key == "factor" ? "weight" : key, value);
        }
      }
      terms.emplace_back(name, MadeMap(std::move(entries), *term));
    }
  }
  const YamlValue* org_loss =
      org != nullptr && org->kind == Kind::kMap ? org->Find("criterion") : nullptr;
  if (org_loss != nullptr && org_loss->kind == Kind::kMap && !org_loss->entries.empty()) {
    const YamlValue* factor = org->Find("factor");
    if (factor != nullptr && factor->kind == Kind::kMap) {
      context.Unsupported(*factor, what + ".org_term.factor",
                          "a factor per output (models with auxiliary outputs) has no libkd form: "
                          "write a term per output");
    }
    const YamlValue* loss_type = org_loss->Find("type");
    std::vector<std::pair<std::string, std::shared_ptr<const YamlValue>>> entries = {
        {"criterion", LossOf(*org_loss)}};
    if (loss_type == nullptr || loss_type->text != "KDLoss") {
      auto no = Made(Kind::kBool, *org_loss);
      auto yes = Made(Kind::kBool, *org_loss);
      yes->boolean = true;
      auto input = MadeMap({{"is_from_teacher", no},
                            {"module_path", MadeString(".", *org_loss)},
                            {"io", MadeString("output", *org_loss)}},
                           *org_loss);
      entries.emplace_back(
          "criterion_wrapper",
          MadeMap({{"key", MadeString("SimpleLossWrapper", *org_loss)},
                   {"kwargs", MadeMap({{"input", input},
                                       {"target", MadeMap({{"uses_label", yes}}, *org_loss)}},
                                      *org_loss)}},
                  *org_loss));
    }
    if (factor != nullptr && factor->kind != Kind::kMap && factor->kind != Kind::kNull) {
      entries.emplace_back("weight", std::make_shared<YamlValue>(*factor));
    }
    terms.emplace_back("org_term", MadeMap(std::move(entries), *org));
  }
  return MadeMap(
      {{"key", MadeString("WeightedSumLoss", *type)},
       {"kwargs", MadeMap({{"sub_terms", MadeMap(std::move(terms), criterion)}}, criterion)}},
      criterion);
}

}  // namespace torchdistill
}  // namespace kd
