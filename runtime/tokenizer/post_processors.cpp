// Post-processors: the special tokens (BOS, EOS...) encode() adds around a text's ids when
// asked to (TemplateProcessing's single template, BertProcessing and RobertaProcessing; a
// ByteLevel one changes only offsets, which tpc does not give), and Sequence, their chain.
#include "components.h"

namespace tpcrt {
namespace tokenizer_detail {

namespace {

/// Appends an item, or refuses it: at most maxComponents items and ids together.
void addPost(PostItem item, const std::string &where, const TokenizerLimits &limits,
             std::vector<PostItem> &post) {
  size_t ids = item.ids.size();
  for (const PostItem &p : post)
    ids += p.ids.size() + 1;
  if (ids >= limits.maxComponents)
    throw LoadError(where + ": " +
                    beyond(limits.maxComponents, "items and special ids", "maxComponents"));
  post.push_back(std::move(item));
}

/// TemplateProcessing: its `single` template, the special tokens' ids from its special_tokens
/// (or, for a token not there, from the vocabulary).
void loadTemplate(const json &j, const std::string &where, const TokenizerLimits &limits,
                  const TokenIdOf &tokenId, std::vector<PostItem> &post) {
  if (!j.contains("single") || !j["single"].is_array())
    throw LoadError(where + ".single: missing or not a list");
  const json &specials = j.value("special_tokens", json::object());
  post.clear();
  for (size_t i = 0; i < j["single"].size(); ++i) {
    const json &item = j["single"][i];
    std::string at = where + ".single[" + std::to_string(i) + "]";
    if (item.contains("Sequence")) {
      addPost({true, {}}, at, limits, post);
    } else if (item.contains("SpecialToken")) {
      std::string name = str(item["SpecialToken"], "id", at + ".SpecialToken");
      std::vector<uint32_t> ids;
      if (specials.is_object() && specials.contains(name) && specials[name].is_object() &&
          specials[name].contains("ids") && specials[name]["ids"].is_array()) {
        const json &list = specials[name]["ids"];
        std::string idsAt = where + ".special_tokens[" + shown(name) + "].ids";
        if (list.size() >= limits.maxComponents)
          throw LoadError(idsAt + ": " + beyond(limits.maxComponents, "ids", "maxComponents"));
        for (size_t k = 0; k < list.size(); ++k)
          ids.push_back(idOf(list[k], idsAt + "[" + std::to_string(k) + "]"));
      } else {
        ids.push_back(tokenId(name, where + ".special_tokens"));
      }
      addPost({false, ids}, at, limits, post);
    } else {
      throw LoadError(at + ": neither a Sequence nor a SpecialToken");
    }
  }
}

} // namespace

void loadPostProcessor(const json &j, const std::string &where, const TokenizerLimits &limits,
                       const TokenIdOf &tokenId, std::vector<PostItem> &post) {
  std::optional<std::string> type =
      componentKind(j, "processors", where, [&](const json &item, const std::string &at) {
        loadPostProcessor(item, at, limits, tokenId, post);
      });
  if (!type)
    return;
  const std::string &kind = *type;
  if (kind == "ByteLevel") {
    // Offsets only; the ids stay as they are.
  } else if (kind == "TemplateProcessing") {
    loadTemplate(j, where, limits, tokenId, post);
  } else if (kind == "BertProcessing" || kind == "RobertaProcessing") {
    auto tokenOf = [&](const char *key) {
      if (!j.contains(key) || !j[key].is_array() || j[key].size() != 2)
        throw LoadError(where + "." + key + ": missing or not [token, id]");
      return idOf(j[key][1], where + "." + key + "[1]");
    };
    post.clear();
    addPost({false, {tokenOf("cls")}}, where, limits, post);
    addPost({true, {}}, where, limits, post);
    addPost({false, {tokenOf("sep")}}, where, limits, post);
  } else {
    throw LoadError(where + ": post-processor type '" + kind + "' is not supported");
  }
}

std::vector<int64_t> postProcess(const std::vector<PostItem> &post,
                                 const std::vector<int64_t> &ids) {
  std::vector<int64_t> out;
  for (const PostItem &item : post) {
    if (item.isSequence)
      out.insert(out.end(), ids.begin(), ids.end());
    else
      out.insert(out.end(), item.ids.begin(), item.ids.end());
  }
  return out;
}

} // namespace tokenizer_detail
} // namespace tpcrt
