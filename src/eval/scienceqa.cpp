#include "latentllm/scienceqa.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <regex>

#include <fmt/format.h>

#include "core/random.hpp"
#include "dist/comm.hpp"
#include "io/json_keys.hpp"
#include "latentllm/error.hpp"
#include "latentllm/generate.hpp"
#include "latentllm/log.hpp"

namespace latentllm::eval::scienceqa {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr std::string_view kLetters = "ABCDE";  // eval_science_qa.py's options

// Python's str.replace(from, to): every non-overlapping occurrence, left to right, in one pass.
std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

std::string strip(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\n\r\f\v");
  if (b == std::string_view::npos) return "";
  return std::string(s.substr(b, s.find_last_not_of(" \t\n\r\f\v") - b + 1));
}

// A string field of problem pid; FormatError naming it otherwise.
std::string text_field(const json& p, const std::string& key, const std::string& origin) {
  const auto it = p.find(key);
  if (it == p.end() || !it->is_string()) {
    throw FormatError(fmt::format("{}: {} (expected a string, got {})", origin, key,
                                  it == p.end() ? std::string("nothing") : io::brief(*it)));
  }
  return it->get<std::string>();
}

// "gradeN" -> N.
int grade_of(const json& p, const std::string& origin) {
  const std::string g = text_field(p, "grade", origin);
  std::smatch m;
  static const std::regex kGrade("grade([0-9]{1,2})");
  if (!std::regex_match(g, m, kGrade) || std::stoi(m[1]) < 1 || std::stoi(m[1]) > 12) {
    throw FormatError(fmt::format("{}: grade (expected grade1..grade12, got \"{}\")", origin, g));
  }
  return std::stoi(m[1]);
}

Problem parse_problem(const json& p, const std::string& pid, const fs::path& data, const std::string& split,
                      const std::string& file) {
  const std::string origin = fmt::format("{}: problem {}", file, pid);
  if (!p.is_object()) throw FormatError(fmt::format("{} (expected an object, got {})", origin, io::brief(p)));
  Problem q;
  q.pid = pid;
  q.question = text_field(p, "question", origin);
  q.hint = text_field(p, "hint", origin);
  q.subject = text_field(p, "subject", origin);
  q.grade = grade_of(p, origin);
  const auto c = p.find("choices");
  if (c == p.end() || !c->is_array() || c->size() < 2 || c->size() > kLetters.size() ||
      !std::all_of(c->begin(), c->end(), [](const json& x) { return x.is_string(); })) {
    throw FormatError(fmt::format("{}: choices (expected 2..5 strings, got {})", origin,
                                  c == p.end() ? std::string("nothing") : io::brief(*c)));
  }
  q.choices = c->get<std::vector<std::string>>();
  const auto a = p.find("answer");
  if (a == p.end() || !a->is_number_integer() || a->get<std::int64_t>() < 0 ||
      a->get<std::int64_t>() >= static_cast<std::int64_t>(q.choices.size())) {
    throw FormatError(fmt::format("{}: answer (expected an index 0..{} into choices, got {})", origin,
                                  q.choices.size() - 1, a == p.end() ? std::string("nothing") : io::brief(*a)));
  }
  q.answer = a->get<int>();
  const auto im = p.find("image");
  if (im != p.end() && !im->is_null()) {
    if (!im->is_string()) throw FormatError(fmt::format("{}: image (expected a file name or null, got {})", origin,
                                                        io::brief(*im)));
    // The image lies under the problem's own split (trainval and minival mix splits).
    const auto ps = p.find("split");
    const std::string folder = ps != p.end() && ps->is_string() ? ps->get<std::string>() : split;
    q.image = data / "images" / folder / pid / im->get<std::string>();
    if (!fs::is_regular_file(*q.image)) {
      throw IoError(fmt::format("{}: image of problem {} missing (expected the file at images/<split>/<pid>/{})",
                                q.image->string(), pid, im->get<std::string>()));
    }
  }
  return q;
}

// The pids of `split` in pid_splits.json.
std::vector<std::string> split_pids(const fs::path& data, const std::string& split) {
  const fs::path file = data / "pid_splits.json";
  const json doc = io::load_json_file(file);
  if (!doc.is_object() || !doc.contains(split)) {
    std::string names;
    if (doc.is_object())
      for (const auto& [k, v] : doc.items()) names += (names.empty() ? "" : ", ") + k;
    throw ConfigError(fmt::format("{}: split {} (expected one of {}, got {})", file.string(), split,
                                  names.empty() ? "its keys" : names, split));
  }
  const json& ids = doc.at(split);
  if (!ids.is_array() || !std::all_of(ids.begin(), ids.end(), [](const json& x) { return x.is_string(); })) {
    throw FormatError(fmt::format("{}: {} (expected a list of problem ids, got {})", file.string(), split,
                                  io::brief(ids)));
  }
  if (ids.empty()) {
    throw ConfigError(fmt::format("{}: split {} (expected a split with problems, got an empty list)", file.string(),
                                  split));
  }
  return ids.get<std::vector<std::string>>();
}

// The argmax of logits [1, V] over the ids of the first n letters; -1 on an empty set.
int best_letter(const MatrixF& logits, const std::vector<std::int32_t>& letters, int n) {
  int best = -1;
  float best_logit = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < n; ++i) {
    const float l = logits(0, letters[static_cast<std::size_t>(i)]);
    if (best < 0 || l > best_logit) {  // first maximum on ties, like torch.argmax
      best = i;
      best_logit = l;
    }
  }
  return best;
}

struct Input {
  std::vector<std::int32_t> ids;         // [T] BOS + prompt, image tokens expanded
  std::vector<float> pixels;             // [n_tiles, 3, S, S]
  std::vector<model::ImageInput> images;  // none, or the problem's image (NeXT: its tiles and size)
  int n_img = 0;
};

// The prompt and its image: CLIPImageProcessor's one tile for LLaVA-1.5, LlavaNextImageProcessor's tiles
// and the original size for NeXT (whose image token count depends on the size).
Input make_input(const model::LlavaModel& m, const io::Tokenizer& tok, const image::ProcessorConfig& processor,
                 const Problem& p, bool llava = false) {
  Input in;
  std::int64_t n_tokens = m.config().features_per_image();
  if (p.image) {
    const image::RgbImage img = image::load_image(*p.image);
    if (m.config().anyres()) {
      image::AnyresPixels a = image::preprocess_anyres(img, processor);
      in.pixels = std::move(a.data);
      in.images.push_back({in.pixels, a.num_tiles(), a.image_height, a.image_width});
    } else {
      in.pixels = image::preprocess(img, processor).data;
      in.images.push_back({in.pixels, 1, 0, 0});
    }
    in.n_img = 1;
    n_tokens = m.image_tokens(in.images.front());
  }
  const std::string prompt = model::vicuna_v1_prompt(llava ? llava_user_message(p) : user_message(p));
  in.ids = tok.encode(model::expand_image_tokens(prompt, n_tokens));
  return in;
}

// What a problem's evaluation produced: the chosen option (-1: unparsable) and the reply.
struct Outcome {
  int pred = -1;
  std::string reply;
};

Outcome answer(const model::LlavaModel& m, const io::Tokenizer& tok, const image::ProcessorConfig& processor,
               const Problem& p, const Options& opt, const std::vector<std::int32_t>& letters,
               const std::vector<std::int64_t>& stops) {
  const bool llava = opt.protocol == Protocol::Llava;
  const Input in = make_input(m, tok, processor, p, llava);
  const int n = static_cast<int>(p.choices.size());
  Outcome o;
  if (opt.protocol == Protocol::Loglik) {
    MatrixF logits;  // [1, V]
    m.forward_last(in.ids, in.images, logits);
    o.pred = best_letter(logits, letters, n);
    o.reply = std::string(1, kLetters[static_cast<std::size_t>(o.pred)]);
    return o;
  }
  // The reply ends at an EOS id, at the limit, or where the prompt and reply fill the model's positions.
  const int room = m.config().text.max_position_embeddings - static_cast<int>(in.ids.size());
  const int limit = std::min(opt.max_new_tokens > 0 ? opt.max_new_tokens : default_max_new_tokens(opt.protocol), room);
  std::vector<std::int32_t> stop_ids;
  for (const std::int64_t id : stops) stop_ids.push_back(static_cast<std::int32_t>(id));
  std::vector<std::int32_t> out = m.generate_greedy(in.ids, in.images, std::max(limit, 1), stop_ids);
  // Any stop id ends the reply (generation_config.json may list several).
  const auto stop = std::find_if(out.begin(), out.end(), [&](std::int32_t id) {
    return std::find(stops.begin(), stops.end(), id) != stops.end();
  });
  out.erase(stop, out.end());
  o.reply = strip(tok.decode(out));
  o.pred = llava ? parse_answer_llava(o.reply, n) : parse_answer(o.reply, n);
  return o;
}

// One rank's outcomes as bytes, in its problems' order: per problem the int32 pred, the uint32 length of
// the reply and its bytes (every rank runs the same binary, so native byte order is shared).
std::string encode(const std::vector<Outcome>& outcomes) {
  std::string b;
  for (const Outcome& o : outcomes) {
    const auto pred = static_cast<std::int32_t>(o.pred);
    const auto len = static_cast<std::uint32_t>(o.reply.size());
    b.append(reinterpret_cast<const char*>(&pred), sizeof pred);
    b.append(reinterpret_cast<const char*>(&len), sizeof len);
    b += o.reply;
  }
  return b;
}

// Appends the outcomes of `bytes` (encode's) to `out`.
void decode(std::string_view bytes, std::vector<Outcome>& out) {
  std::size_t at = 0;
  const auto take = [&](void* dst, std::size_t n) {
    if (bytes.size() - at < n) {
      throw Error(fmt::format("scienceqa: outcomes of a rank truncated (expected {} more bytes at {}, got {})", n, at,
                              bytes.size() - at));
    }
    std::memcpy(dst, bytes.data() + at, n);
    at += n;
  };
  while (at < bytes.size()) {
    std::int32_t pred = 0;
    std::uint32_t len = 0;
    take(&pred, sizeof pred);
    take(&len, sizeof len);
    Outcome o;
    o.pred = pred;
    o.reply.resize(len);
    take(o.reply.data(), len);
    out.push_back(std::move(o));
  }
}

// The result of every problem's outcome, in the problems' order (the same on any number of ranks).
Result tally(const std::vector<Problem>& problems, const std::vector<Outcome>& outcomes) {
  if (outcomes.size() != problems.size()) {
    throw Error(fmt::format("scienceqa: outcomes gathered from {} ranks (expected {}, got {})", dist::size(),
                            problems.size(), outcomes.size()));
  }
  Result r;
  for (const std::string& c : category_names()) r.correct[c] = r.count[c] = 0;
  for (std::size_t i = 0; i < problems.size(); ++i) {
    const Problem& p = problems[i];
    Prediction pr;
    pr.pid = p.pid;
    pr.answer = p.answer;
    pr.pred = outcomes[i].pred;
    pr.reply = outcomes[i].reply;
    pr.correct = pr.pred == p.answer;
    r.unparsable += pr.pred < 0;
    std::vector<std::string> cats = categories(p);
    cats.push_back("AVG");
    for (const std::string& c : cats) {
      ++r.count[c];
      r.correct[c] += pr.correct;
    }
    r.predictions.push_back(std::move(pr));
  }
  return r;
}

}  // namespace

std::vector<Problem> load_problems(const fs::path& data, const std::string& split, int max_problems) {
  const std::vector<std::string> pids = split_pids(data, split);
  const fs::path file = data / "problems.json";
  const json doc = io::load_json_file(file);
  if (!doc.is_object()) {
    throw FormatError(fmt::format("{}: problems (expected an object of problems by id, got {})", file.string(),
                                  io::brief(doc)));
  }
  const std::size_t n = max_problems > 0 ? std::min(pids.size(), static_cast<std::size_t>(max_problems)) : pids.size();
  std::vector<Problem> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto it = doc.find(pids[i]);
    if (it == doc.end()) {
      throw FormatError(fmt::format("{}: problem {} of split {} (expected it in problems.json, got nothing)",
                                    file.string(), pids[i], split));
    }
    out.push_back(parse_problem(*it, pids[i], data, split, file.string()));
  }
  return out;
}

void require_llava(const fs::path& dir) {
  const fs::path file = dir / "config.json";
  const json doc = io::load_json_file(file);
  if (model::is_llava_config(doc)) return;
  const auto a = doc.is_object() ? doc.find("architectures") : doc.end();
  const std::string got = a != doc.end() && a->is_array() && !a->empty() ? io::brief(a->front()) : "no architectures";
  throw ConfigError(fmt::format("{}: not a LLaVA checkpoint (expected architectures LlavaForConditionalGeneration "
                                "for --task scienceqa, got {})", file.string(), got));
}

std::vector<std::string> categories(const Problem& p) {
  std::vector<std::string> c;
  if (p.subject == "natural science") c.push_back("NAT");
  if (p.subject == "social science") c.push_back("SOC");
  if (p.subject == "language science") c.push_back("LAN");
  if (!p.hint.empty()) c.push_back("TXT");
  if (p.image) c.push_back("IMG");
  if (p.hint.empty() && !p.image) c.push_back("NO");
  c.push_back(p.grade <= 6 ? "G1-6" : "G7-12");
  return c;
}

const std::vector<std::string>& category_names() {
  static const std::vector<std::string> kNames = {"NAT", "SOC", "LAN", "TXT", "IMG", "NO", "G1-6", "G7-12", "AVG"};
  return kNames;
}

std::string user_message(const Problem& p) {
  const std::string context = strip(p.hint);
  std::string options;
  for (std::size_t i = 0; i < p.choices.size(); ++i)
    options += fmt::format("{}({}) {}", i ? " " : "", kLetters[i], p.choices[i]);
  return fmt::format("{}Context: {}\nQuestion: {}\nOptions: {}\nAnswer with the option's letter from the given "
                     "choices directly.",
                     p.image ? "<image>\n" : "", context.empty() ? "N/A" : context, p.question, options);
}

std::string llava_user_message(const Problem& p) {
  std::string options;
  for (std::size_t i = 0; i < p.choices.size(); ++i)
    options += fmt::format("{}({}) {}", i ? " " : "", kLetters[i], p.choices[i]);
  const std::string context = strip(p.hint);  // " ".join([hint, ""]).strip()
  std::string input = fmt::format("Context: {}\nQuestion: {}\nOptions: {}\n", context.empty() ? "N/A" : context,
                                  p.question, options);
  input = strip(replace_all(input, "  ", " "));
  const std::string qs = strip(replace_all(input, std::string(model::kImageToken), ""));
  return fmt::format("{}{}\nAnswer with the option's letter from the given choices directly.",
                     p.image ? "<image>\n" : "", qs);
}

int parse_answer_llava(std::string_view reply, int n_choices) {
  const std::string text(reply);
  char letter = 0;
  if (text.size() == 1 && kLetters.find(text[0]) != std::string_view::npos) {
    letter = text[0];
  } else if (text.size() >= 3 && kLetters.find(text[0]) != std::string_view::npos && text.compare(1, 2, ". ") == 0) {
    letter = text[0];
  } else {
    // re.findall(r'The answer is ([A-Z]).'): non-overlapping matches, '.' any character but '\n'.
    static const std::regex kAnswerIs("The answer is ([A-Z])[^\n]");
    const auto first = std::sregex_iterator(text.begin(), text.end(), kAnswerIs);
    if (std::distance(first, std::sregex_iterator()) == 1) letter = (*first)[1].str()[0];
  }
  const auto i = letter ? static_cast<int>(kLetters.find(letter)) : -1;
  return letter && i >= 0 && i < n_choices ? i : -1;
}

int parse_answer(std::string_view reply, int n_choices) {
  std::string text;  // newlines read as ". ", as eval_science_qa.py does
  for (char ch : reply) text += ch == '\n' ? std::string(". ") : std::string(1, ch);
  const std::string s = strip(text);
  char letter = 0;
  std::smatch m;
  if (s.size() == 1 && kLetters.find(s[0]) != std::string_view::npos) {
    letter = s[0];
  } else if (text.size() >= 3 && kLetters.find(text[0]) != std::string_view::npos && text.compare(1, 2, ". ") == 0) {
    letter = text[0];
  } else if (static const std::regex kAnswerIs("The answer is ([A-E])"); std::regex_search(text, m, kAnswerIs)) {
    letter = m[1].str()[0];
  }
  const auto i = letter ? static_cast<int>(kLetters.find(letter)) : -1;
  return i >= 0 && i < n_choices ? i : -1;
}

Protocol parse_protocol(const std::string& name) {
  if (name == "llava") return Protocol::Llava;
  if (name == "generate") return Protocol::Generate;
  if (name == "loglik") return Protocol::Loglik;
  throw ConfigError(fmt::format("--protocol (expected llava, generate or loglik, got {})", name));
}

std::string_view protocol_name(Protocol p) {
  return p == Protocol::Llava ? "llava" : p == Protocol::Generate ? "generate" : "loglik";
}

int default_max_new_tokens(Protocol p) { return p == Protocol::Llava ? 1024 : p == Protocol::Generate ? 3 : 0; }

std::vector<std::int32_t> letter_token_ids(const io::Tokenizer& tok, int n_letters) {
  std::vector<std::int32_t> ids;
  for (int i = 0; i < n_letters; ++i) {
    const std::string letter(1, kLetters[static_cast<std::size_t>(i)]);
    // The reply follows "ASSISTANT:" after a space in vicuna_v1's conversation ("ASSISTANT: A</s>"), so
    // its first token is what the tokenizer makes of " A" there.
    const std::vector<std::int32_t> t = tok.encode("ASSISTANT: " + letter, false);
    if (t.empty() || strip(tok.decode(std::span<const std::int32_t>(&t.back(), 1))) != letter) {
      throw ConfigError(fmt::format("tokenizer: option letter {} (expected \"ASSISTANT: {}\" to end in a token of "
                                    "the letter alone, got {})", letter, letter,
                                    t.empty() ? std::string("no tokens") : fmt::format("id {}", t.back())));
    }
    ids.push_back(t.back());
  }
  return ids;
}

double Result::accuracy(const std::string& category) const {
  const auto n = count.find(category);
  if (n == count.end() || n->second == 0) return std::numeric_limits<double>::quiet_NaN();
  return 100.0 * correct.at(category) / n->second;
}

Result evaluate(const model::LlavaModel& m, const io::Tokenizer& tok, const image::ProcessorConfig& processor,
                const std::vector<Problem>& problems, const Options& opt, const ProgressFn& progress) {
  const std::vector<std::int32_t> letters = letter_token_ids(tok);
  const std::vector<std::int64_t> stops = stop_token_ids(m.language_model());
  const auto n = static_cast<std::int64_t>(problems.size());
  // This rank's contiguous share of the problems; rank order is problem order.
  const dist::Share share = dist::my_share(n);
  std::vector<Outcome> mine;
  const auto t0 = Clock::now();
  for (std::int64_t i = share.begin; i < share.end; ++i) {
    const Problem& p = problems[static_cast<std::size_t>(i)];
    dist::set_activity(fmt::format("eval: problem {} ({} of {})", p.pid, i + 1, n));
    mine.push_back(answer(m, tok, processor, p, opt, letters, stops));
    if (progress) {
      // The whole run's progress as this rank's fraction of its share (the ranks go at about one pace).
      const auto done = static_cast<std::int64_t>(mine.size());
      progress(static_cast<int>(done * n / share.size()), static_cast<int>(n),
               std::chrono::duration<double>(Clock::now() - t0).count());
    }
  }
  dist::set_activity("eval: gathering the outcomes");
  std::vector<Outcome> all;
  all.reserve(problems.size());
  for (const std::string& bytes : dist::all_gather_bytes(encode(mine))) decode(bytes, all);
  Result r = tally(problems, all);
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

void embed_calibration(const model::LlavaModel& m, CalibrationSet& set) {
  const model::VisionConfig& v = m.config().vision;
  const std::size_t tile = static_cast<std::size_t>(v.num_channels * v.image_size * v.image_size);
  set.embeddings.resize(static_cast<Eigen::Index>(set.ids.size()), m.config().text.hidden_size);
  std::int64_t r0 = 0;
  for (std::size_t k = 0; k < set.lengths.size(); ++k) {
    const CalibrationSet::Image& img = set.image_of.at(k);
    std::vector<model::ImageInput> images;
    if (img.n_tiles > 0) {
      images.push_back({std::span<const float>(set.pixels).subspan(img.first_tile * tile, img.n_tiles * tile),
                        img.n_tiles, img.height, img.width});
    }
    const auto ids = std::span<const std::int32_t>(set.ids).subspan(static_cast<std::size_t>(r0),
                                                                   static_cast<std::size_t>(set.lengths[k]));
    MatrixF h;  // [T_k, d] the prompt's embeddings, the image features in place of its image tokens
    m.embed_prompt(ids, images, h);
    set.embeddings.middleRows(r0, h.rows()) = h;
    r0 += h.rows();
  }
}

CalibrationSet calibration_set(const model::LlavaModel& m, const io::Tokenizer& tok,
                               const image::ProcessorConfig& processor, const fs::path& data, const std::string& split,
                               int n, std::uint64_t seed) {
  std::vector<Problem> pool = load_problems(data, split);
  if (n <= 0 || static_cast<std::size_t>(n) > pool.size()) {
    throw ConfigError(fmt::format("--nsamples {} (expected 1..{}, the {} problems of {})", n, pool.size(), split,
                                  data.string()));
  }
  // The first n of a seeded Fisher-Yates shuffle: n distinct problems, the same on every platform.
  std::mt19937_64 rng(seed);
  for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i) {
    std::swap(pool[i], pool[i + static_cast<std::size_t>(core::uniform_below(rng, pool.size() - i))]);
  }
  CalibrationSet out;
  const model::VisionConfig& v = m.config().vision;
  const std::size_t tile = static_cast<std::size_t>(v.num_channels * v.image_size * v.image_size);
  for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i) {
    const Input in = make_input(m, tok, processor, pool[i]);
    CalibrationSet::Image img{out.tiles, 0, 0, 0};
    if (!in.images.empty()) {
      img = {out.tiles, in.images.front().n_tiles, in.images.front().height, in.images.front().width};
      out.pixels.insert(out.pixels.end(), in.pixels.begin(), in.pixels.end());
      out.tiles += img.n_tiles;
    }
    out.ids.insert(out.ids.end(), in.ids.begin(), in.ids.end());
    out.lengths.push_back(static_cast<int>(in.ids.size()));
    out.pids.push_back(pool[i].pid);
    out.images += in.n_img;
    out.image_of.push_back(img);
  }
  if (out.pixels.size() != static_cast<std::size_t>(out.tiles) * tile) {
    throw Error(fmt::format("calibration: {} pixel values for {} tiles (expected {} each)", out.pixels.size(), out.tiles,
                            tile));
  }
  embed_calibration(m, out);
  log_info("calibration: {} ScienceQA {} problems of {} ({} with an image), {} tokens, {}..{} a sequence", n, split,
           data.string(), out.images, out.ids.size(), *std::min_element(out.lengths.begin(), out.lengths.end()),
           *std::max_element(out.lengths.begin(), out.lengths.end()));
  return out;
}

}  // namespace latentllm::eval::scienceqa
