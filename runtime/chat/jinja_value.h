// Values: Python's types as templates see them. Copies are cheap (templates copy values
// freely: every variable read, every loop item): strings, lists and dicts are shared, and
// immutable except a namespace's attributes.
#ifndef TPCRT_CHAT_JINJA_VALUE_H
#define TPCRT_CHAT_JINJA_VALUE_H

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tpcrt::jinja {

// A string value's bytes, with its length in code points once something has counted it, and
// for text that is not ASCII, once something indexes it, where every kMarkEvery-th code point
// starts: s[i] walks less than kMarkEvery characters, not i.
struct Text {
  explicit Text(std::string bytes) : bytes(std::move(bytes)) {}
  static constexpr int64_t kMarkEvery = 64;
  std::string bytes;
  mutable int64_t codePoints = -1;
  mutable std::vector<size_t> marks;
};

struct ListBox;
struct DictBox;
class Dict;
struct Value;
using List = std::vector<Value>;

struct Value {
  enum Kind { Undefined, None, Bool, Int, Float, String, ListV, DictV, NamespaceV, Function };
  Kind kind = Undefined;
  bool b = false;
  bool tuple = false; // a ListV that Python would hold as a tuple: printed (a, b)
  int nesting = 0;    // lists and dicts inside, when it was built
  int64_t i = 0;
  double f = 0;
  std::shared_ptr<const Text> text; // a String's; an Undefined's hint; a Function's name
  std::shared_ptr<ListBox> list;
  std::shared_ptr<DictBox> dict; // DictV and NamespaceV

  const std::string &s() const;
  const List &seq() const;
  Dict &map() const;

  static Value undefined(std::string hint) {
    Value v;
    v.text = std::make_shared<const Text>(std::move(hint));
    return v;
  }
  static Value function(std::string name) {
    Value v = undefined(std::move(name));
    v.kind = Function;
    return v;
  }
  static Value none() {
    Value v;
    v.kind = None;
    return v;
  }
  static Value boolean(bool x) {
    Value v;
    v.kind = Bool;
    v.b = x;
    return v;
  }
  static Value integer(int64_t x) {
    Value v;
    v.kind = Int;
    v.i = x;
    return v;
  }
  static Value number(double x) {
    Value v;
    v.kind = Float;
    v.f = x;
    return v;
  }
  // Unchecked: the renderer's own constructors check the limits of what a template builds.
  static Value str(std::string x) {
    Value v;
    v.kind = String;
    if (!x.empty())
      v.text = std::make_shared<const Text>(std::move(x));
    return v;
  }
  static Value makeList(List x, bool tuple = false);
  static Value makeDict(Dict x, Kind kind = DictV);

  bool isNumber() const { return kind == Bool || kind == Int || kind == Float; }
  bool isInt() const { return kind == Int || kind == Bool; }
  bool isMapping() const { return kind == DictV || kind == NamespaceV; }
  double asDouble() const { return kind == Float ? f : kind == Bool ? (b ? 1 : 0) : double(i); }
  int64_t asInt() const { return kind == Bool ? (b ? 1 : 0) : i; }
};

// A dict's entries in insertion order, as Python's dict keeps them, with an index by key once
// there are enough of them for a linear search to cost more than hashing.
class Dict {
public:
  using Entry = std::pair<std::string, Value>;

  const Value *find(const std::string &key) const {
    size_t at = position(key);
    return at == npos ? nullptr : &entries[at].second;
  }
  // Sets `key`; true when it is new.
  bool set(const std::string &key, Value v) {
    size_t at = position(key);
    if (at != npos) {
      entries[at].second = std::move(v);
      return false;
    }
    entries.emplace_back(key, std::move(v));
    if (!index.empty()) {
      index.emplace(key, entries.size() - 1);
    } else if (entries.size() > kIndexFrom) {
      for (size_t k = 0; k < entries.size(); ++k)
        index.emplace(entries[k].first, k);
    }
    return true;
  }
  size_t size() const { return entries.size(); }
  bool empty() const { return entries.empty(); }
  Value &valueAt(size_t k) { return entries[k].second; }
  std::vector<Entry>::const_iterator begin() const { return entries.begin(); }
  std::vector<Entry>::const_iterator end() const { return entries.end(); }

private:
  static constexpr size_t npos = std::string::npos;
  static constexpr size_t kIndexFrom = 32;
  size_t position(const std::string &key) const {
    if (!index.empty()) {
      auto hit = index.find(key);
      return hit == index.end() ? npos : hit->second;
    }
    for (size_t k = 0; k < entries.size(); ++k)
      if (entries[k].first == key)
        return k;
    return npos;
  }
  std::vector<Entry> entries;
  std::unordered_map<std::string, size_t> index;
};

// Freeing a value frees what it holds, and a chain of namespaces built by setting attributes
// can be any number of levels deep: freeing it recursively would overflow the stack. So lists
// and dicts are freed through a queue instead, one level at a time: a container whose last
// reference goes is queued, and the outermost release frees the queue (what freeing one
// container releases is queued behind it). The queue is intrusive, so freeing never allocates.
struct Container {
  Container() = default;
  Container(const Container &) = delete;
  Container &operator=(const Container &) = delete;
  virtual ~Container() = default;
  Container *nextDead = nullptr;
};

struct ListBox : Container {
  explicit ListBox(List items) : items(std::move(items)) {}
  List items;
};

struct DictBox : Container {
  explicit DictBox(Dict entries) : entries(std::move(entries)) {}
  Dict entries;
};

// Frees `c` once no release in progress on this thread is freeing others.
void release(Container *c) noexcept;

template <class Box, class Contents> std::shared_ptr<Box> boxed(Contents contents) {
  return std::shared_ptr<Box>(new Box(std::move(contents)), [](Box *b) { release(b); });
}

inline const std::string &Value::s() const {
  static const std::string empty;
  return text ? text->bytes : empty;
}
inline const List &Value::seq() const { return list->items; }
inline Dict &Value::map() const { return dict->entries; }

// Python's type(v).__name__, as its error messages name types.
const char *typeName(const Value &v);

// Python's bool(v).
bool truthy(const Value &v);

// Python's str() of a float: the shortest text that reads back as `x`.
std::string pyFloat(double x);

} // namespace tpcrt::jinja

#endif // TPCRT_CHAT_JINJA_VALUE_H
