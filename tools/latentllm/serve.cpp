// `latentllm serve`: an OpenAI-compatible HTTP server (Debian's cpp-httplib) over one checkpoint:
// GET /health, GET /v1/models, POST /v1/completions (string or token-id prompts, a list of them, max_tokens
// including 0, temperature, top_p, seed, stop, logprobs, echo: what lm-eval's local-completions sends for
// loglikelihood requests) and POST /v1/chat/completions (the checkpoint's chat template; on a LLaVA
// checkpoint also LLaVA-1.5's vicuna_v1 conversation when it ships none, and images as OpenAI's image_url
// content parts with base64 data URLs, decoded in memory and preprocessed as `generate --image` does),
// both streamed as server-sent events with "stream": true. A malformed request, an over-long prompt or an
// unknown model is an HTTP 400 / 404 with OpenAI's error object; SIGTERM or SIGINT stops accepting
// connections, lets the requests in flight finish, and exits 0. Requests are served by a thread pool;
// generation is batched across requests (serve_batch.hpp: continuous batching within the KV budget that
// --max-memory leaves after the weights, at most --max-batch requests decoding at once).
#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <unistd.h>
#include <thread>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "llava_input.hpp"
#include "options.hpp"
#include "serve_batch.hpp"
#include "serve_chat.hpp"
#include "latentllm/chat.hpp"
#include "latentllm/error.hpp"
#include "latentllm/generate.hpp"
#include "latentllm/image.hpp"
#include "latentllm/io.hpp"
#include "latentllm/model.hpp"
#include "latentllm/multimodal.hpp"
#include "latentllm/tokenizer.hpp"

// Last: httplib.h brings <resolv.h>, whose _res macro breaks Eigen's headers included after it.
#include <httplib.h>

namespace latentllm::cli {
namespace {

using ojson = nlohmann::ordered_json;

struct ServeArgs {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string name;  // the model id clients send; default: the directory's name
  std::string max_memory;
  int max_batch = 8;
  std::string kv_cache = "auto";
  RunArgs run;
};

// An OpenAI error: the HTTP status and its error object.
struct HttpError {
  int status;
  std::string message, type, code, param;
};

[[noreturn]] void bad_request(const std::string& message, const std::string& param = "",
                              const std::string& code = "") {
  throw HttpError{400, message, "invalid_request_error", code, param};
}

void send_error(httplib::Response& res, const HttpError& e) {
  ojson err = {{"message", e.message}, {"type", e.type},
               {"param", e.param.empty() ? ojson(nullptr) : ojson(e.param)},
               {"code", e.code.empty() ? ojson(nullptr) : ojson(e.code)}};
  res.status = e.status;
  res.set_content(ojson{{"error", err}}.dump(), "application/json");
}

// Typed reads of the request's fields, each a 400 naming the field when it has the wrong type.
double number_or(const ojson& req, const char* key, double dflt) {
  const auto it = req.find(key);
  if (it == req.end() || it->is_null()) return dflt;
  if (!it->is_number()) bad_request(fmt::format("'{}' must be a number, got {}", key, it->dump()), key);
  return it->get<double>();
}
std::int64_t int_or(const ojson& req, const char* key, std::int64_t dflt) {
  const auto it = req.find(key);
  if (it == req.end() || it->is_null()) return dflt;
  if (!it->is_number_integer()) bad_request(fmt::format("'{}' must be an integer, got {}", key, it->dump()), key);
  return it->get<std::int64_t>();
}
bool bool_or(const ojson& req, const char* key, bool dflt) {
  const auto it = req.find(key);
  if (it == req.end() || it->is_null()) return dflt;
  if (!it->is_boolean()) bad_request(fmt::format("'{}' must be a boolean, got {}", key, it->dump()), key);
  return it->get<bool>();
}
std::vector<std::string> stop_strings(const ojson& req) {
  const auto it = req.find("stop");
  if (it == req.end() || it->is_null()) return {};
  if (it->is_string()) return {it->get<std::string>()};
  if (it->is_array() && it->size() <= 4 && std::all_of(it->begin(), it->end(), [](const ojson& s) { return s.is_string(); }))
    return it->get<std::vector<std::string>>();
  bad_request("'stop' must be a string or a list of at most 4 strings", "stop");
}

// The decoded text of one token (OpenAI's "tokens" entries and top_logprobs keys).
std::string token_text(const io::Tokenizer& tok, std::int32_t id) { return tok.decode(std::span<const std::int32_t>(&id, 1)); }

// A LLaVA checkpoint's parts the chat images need: the model and its image processor.
struct LlavaParts {
  const model::LlavaModel& lm;
  image::ProcessorConfig processor;
};

class Server {
 public:
  // `llava`: set on a LLaVA checkpoint, whose language model is `m`.
  Server(const model::Model& m, const io::Tokenizer& tok, std::optional<io::ChatTemplate> tmpl, std::string id,
         const BatchLimits& limits, std::optional<LlavaParts> llava = std::nullopt)
      : m_(m), tok_(tok), tmpl_(std::move(tmpl)), id_(std::move(id)), llava_(std::move(llava)),
        batcher_(m, tok, limits, compute_) {}

  const Batcher& batcher() const { return batcher_; }

  void routes(httplib::Server& svr) {
    svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      const BatchLimits& l = batcher_.limits();
      const Batcher::Counts c = batcher_.counts();
      const int conv = static_cast<int>(std::min<std::int64_t>(m_.config().max_position_embeddings, 2048));
      const ojson h = {{"status", "ok"}, {"max_batch", l.max_batch}, {"kv_cache", std::string(model::kv_cache_mode_name(l.kv_cache))},
                       {"kv_bytes", l.kv_bytes}, {"kv_bytes_per_token", l.bytes_per_token},
                       {"conversation_tokens", conv}, {"concurrent_conversations", batcher_.slots(conv)},
                       {"running", c.running}, {"queued", c.queued}, {"peak_running", c.peak_running},
                       {"peak_queued", c.peak_queued}, {"abandoned", c.abandoned}};
      res.set_content(h.dump(), "application/json");
    });
    svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      const ojson model = {{"id", id_}, {"object", "model"}, {"created", created_}, {"owned_by", "latentllm"},
                           {"max_model_len", m_.config().max_position_embeddings}};
      res.set_content(ojson{{"object", "list"}, {"data", ojson::array({model})}}.dump(), "application/json");
    });
    svr.Post("/v1/completions", guarded([this](const ojson& req, httplib::Response& res) { completions(req, res); }));
    svr.Post("/v1/chat/completions", guarded([this](const ojson& req, httplib::Response& res) { chat(req, res); }));
    svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (res.status == 404 && res.body.empty())
        send_error(res, {404, fmt::format("no route {} {}", req.method, req.path), "invalid_request_error", "not_found", ""});
    });
  }

 private:
  using Handler = std::function<void(const ojson&, httplib::Response&)>;

  // Parses the body and turns every failure into an OpenAI error: 400 for bad input (a latentllm error
  // included: a prompt too long for the model, a template that refuses the messages), 404 for another model.
  httplib::Server::Handler guarded(Handler h) {
    return [this, h](const httplib::Request& r, httplib::Response& res) {
      try {
        io::check_json_depth(r.body, "the request body");  // a latentllm error: 400 below
        const ojson req = ojson::parse(r.body, nullptr, false);
        if (req.is_discarded() || !req.is_object()) bad_request("the request body is not a JSON object");
        const auto model = req.find("model");
        if (model != req.end() && !(model->is_string() && model->get<std::string>() == id_)) {
          throw HttpError{404, fmt::format("The model '{}' does not exist (this server has '{}')",
                                           model->is_string() ? model->get<std::string>() : model->dump(), id_),
                          "invalid_request_error", "model_not_found", "model"};
        }
        h(req, res);
      } catch (const HttpError& e) {
        send_error(res, e);
      } catch (const Error& e) {
        send_error(res, {400, e.what(), "invalid_request_error", "", ""});
      }
    };
  }

  // The prompts of a completions request: a string, a list of token ids, or a list of either.
  std::vector<std::vector<std::int32_t>> prompts(const ojson& req) const {
    const auto it = req.find("prompt");
    if (it == req.end()) bad_request("'prompt' is required", "prompt");
    const auto one = [this](const ojson& p) {
      if (p.is_string()) return tok_.encode(p.get<std::string>());
      if (p.is_array() && !p.empty() && std::all_of(p.begin(), p.end(), [](const ojson& x) { return x.is_number_integer(); })) {
        std::vector<std::int32_t> ids;
        for (const ojson& x : p) {
          const auto id = x.get<std::int64_t>();
          if (id < 0 || id >= m_.config().vocab_size)
            bad_request(fmt::format("prompt token id {} (expected 0..{})", id, m_.config().vocab_size - 1), "prompt");
          ids.push_back(static_cast<std::int32_t>(id));
        }
        return ids;
      }
      bad_request("'prompt' must be a string, a list of token ids, or a list of those", "prompt");
    };
    std::vector<std::vector<std::int32_t>> out;
    if (it->is_array() && !it->empty() && (it->front().is_string() || it->front().is_array())) {
      for (const ojson& p : *it) out.push_back(one(p));
    } else {
      out.push_back(one(*it));
    }
    for (const auto& ids : out)
      if (ids.empty()) bad_request("'prompt' is empty (expected at least one token)", "prompt");
    return out;
  }

  eval::GenerateOptions generation(const ojson& req, std::int64_t max_tokens, std::size_t prompt_len) const {
    eval::GenerateOptions g;
    const std::int64_t room = m_.config().max_position_embeddings - static_cast<std::int64_t>(prompt_len);
    if (max_tokens < 0) bad_request(fmt::format("'max_tokens' must be >= 0, got {}", max_tokens), "max_tokens");
    if (max_tokens > room) {
      throw HttpError{400, fmt::format("This model's maximum context length is {} tokens; the prompt has {} and "
                                       "max_tokens asks for {}", m_.config().max_position_embeddings, prompt_len,
                                       max_tokens), "invalid_request_error", "context_length_exceeded", "max_tokens"};
    }
    g.max_new_tokens = static_cast<int>(max_tokens);
    g.sampling.temperature = number_or(req, "temperature", 1.0);
    g.sampling.top_p = number_or(req, "top_p", 1.0);
    g.sampling.seed = static_cast<std::uint64_t>(int_or(req, "seed", 0));
    try {
      eval::check_sampling_options(g.sampling);
    } catch (const ConfigError& e) {
      bad_request(e.what());
    }
    return g;
  }

  // One completion: the generated ids and text (cut at the first stop string), why it ended.
  struct Completion {
    std::vector<std::int32_t> tokens;
    std::string text, finish_reason;
  };

  Completion complete(const std::vector<std::int32_t>& ids, eval::GenerateOptions g, const std::vector<std::string>& stops,
                      const std::function<bool(std::string_view)>& on_piece = {}, const eval::PrefillFn& prefill = {}) {
    Completion c;
    if (g.max_new_tokens == 0) {
      c.finish_reason = "length";
      return c;
    }
    g.kv_cache = batcher_.limits().kv_cache;
    const Batcher::Result r = batcher_.run({ids, g, prefill, stops}, on_piece);
    c.tokens = r.tokens;
    c.text = r.text;
    std::size_t cut = std::string::npos;
    for (const std::string& s : stops) cut = std::min(cut, c.text.find(s));
    if (cut != std::string::npos) c.text.resize(cut);
    c.finish_reason = r.stopped_at_eos || cut != std::string::npos ? "stop" : "length";
    return c;
  }

  // OpenAI's logprobs object for ids[from..) of a prompt ids[0..prompt) and its completion: tokens,
  // token_logprobs (null without context), top_logprobs, text_offset (characters of the text before each
  // token, from `offset`). The prompt's figures do not depend on the completion (eval::token_logprobs).
  ojson logprobs(const std::vector<std::int32_t>& ids, std::size_t prompt, std::size_t from, int top,
                 std::size_t offset) const {
    const std::vector<eval::TokenLogprob> lp = eval::token_logprobs(m_, ids, top, prompt);
    ojson tokens = ojson::array(), values = ojson::array(), tops = ojson::array(), offsets = ojson::array();
    // Each token's text is what it adds to the decoded text before it (its leading space included), so
    // the tokens concatenate to the echoed text and text_offset indexes it.
    io::TextStream text(tok_, std::vector<std::int32_t>(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(from)));
    for (std::size_t i = from; i < ids.size(); ++i) {
      std::string t = text.push(ids[i]);
      if (i + 1 == ids.size()) t += text.finish();
      tokens.push_back(t);
      values.push_back(std::isnan(lp[i].logprob) ? ojson(nullptr) : ojson(lp[i].logprob));
      ojson top_map = ojson::object();
      for (const auto& [id, v] : lp[i].top) top_map[token_text(tok_, id)] = v;
      tops.push_back(i == 0 ? ojson(nullptr) : top_map);
      offsets.push_back(offset);
      offset += t.size();
    }
    return {{"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", tops}, {"text_offset", offsets}};
  }

  void completions(const ojson& req, httplib::Response& res) {
    const auto batch = prompts(req);
    const std::int64_t max_tokens = int_or(req, "max_tokens", 16);
    const bool echo = bool_or(req, "echo", false), stream = bool_or(req, "stream", false);
    const std::int64_t n_logprobs = int_or(req, "logprobs", -1);
    if (n_logprobs > 20) bad_request(fmt::format("'logprobs' must be at most 20, got {}", n_logprobs), "logprobs");
    if (int_or(req, "n", 1) != 1) bad_request("'n' must be 1 (one completion per prompt)", "n");
    const std::vector<std::string> stops = stop_strings(req);
    std::vector<eval::GenerateOptions> opts;
    for (const auto& ids : batch) opts.push_back(generation(req, max_tokens, ids.size()));
    const std::string id = fmt::format("cmpl-{}", next_id());
    if (stream) {
      stream_completion(req, res, batch, opts, stops, id);
      return;
    }
    ojson choices = ojson::array();
    std::int64_t prompt_tokens = 0, completion_tokens = 0;
    for (std::size_t k = 0; k < batch.size(); ++k) {
      const auto& ids = batch[k];
      const Completion c = complete(ids, opts[k], stops);
      const std::string prompt_text = echo ? tok_.decode(ids) : "";
      ojson choice = {{"index", k}, {"text", prompt_text + c.text}, {"logprobs", nullptr},
                      {"finish_reason", c.finish_reason}};
      if (n_logprobs >= 0) {
        std::vector<std::int32_t> all = ids;
        all.insert(all.end(), c.tokens.begin(), c.tokens.end());
        const std::lock_guard<std::mutex> lock(compute_);  // between the batcher's steps
        choice["logprobs"] = logprobs(all, ids.size(), echo ? 0 : ids.size(), static_cast<int>(n_logprobs), 0);
      }
      choices.push_back(choice);
      prompt_tokens += static_cast<std::int64_t>(ids.size());
      completion_tokens += static_cast<std::int64_t>(c.tokens.size());
    }
    const ojson out = {{"id", id}, {"object", "text_completion"}, {"created", now()}, {"model", id_},
                       {"choices", choices},
                       {"usage", {{"prompt_tokens", prompt_tokens}, {"completion_tokens", completion_tokens},
                                  {"total_tokens", prompt_tokens + completion_tokens}}}};
    res.set_content(out.dump(-1, ' ', false, ojson::error_handler_t::replace), "application/json");
  }

  // Server-sent events: one "data: {json}" per piece of text, a last one with finish_reason, "data: [DONE]".
  void sse(httplib::Response& res, std::function<void(const std::function<bool(const ojson&)>&)> run) {
    res.set_chunked_content_provider("text/event-stream", [this, run](std::size_t, httplib::DataSink& sink) {
      const auto send = [&sink](const ojson& chunk) {
        const std::string line = "data: " + chunk.dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n\n";
        return sink.write(line.data(), line.size());
      };
      try {
        run(send);
      } catch (const Error& e) {
        send(ojson{{"error", {{"message", e.what()}, {"type", "server_error"}}}});
      }
      const std::string done = "data: [DONE]\n\n";
      sink.write(done.data(), done.size());
      sink.done();
      return true;
    });
  }

  void stream_completion(const ojson&, httplib::Response& res, std::vector<std::vector<std::int32_t>> batch,
                         std::vector<eval::GenerateOptions> opts, std::vector<std::string> stops, std::string id) {
    sse(res, [this, batch, opts, stops, id](const std::function<bool(const ojson&)>& send) {
      for (std::size_t k = 0; k < batch.size(); ++k) {
        const auto chunk = [&](const std::string& text, const ojson& finish) {
          return ojson{{"id", id}, {"object", "text_completion"}, {"created", now()}, {"model", id_},
                       {"choices", ojson::array({{{"index", k}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish}}})}};
        };
        const Completion c = complete(batch[k], opts[k], stops, [&](std::string_view piece) { return send(chunk(std::string(piece), nullptr)); });
        send(chunk("", c.finish_reason));
      }
    });
  }

  // A chat request's prompt: its ids and, on a LLaVA checkpoint, its images (null without).
  struct ChatPrompt {
    std::vector<std::int32_t> ids;
    std::shared_ptr<const LlavaImages> images;
  };

  // The prompt of a chat request: the checkpoint's template over the messages, with add_generation_prompt
  // (a LLaVA checkpoint without one: vicuna_v1, as generate), its images' placeholders expanded.
  ChatPrompt chat_prompt(const ojson& req) const {
    const auto it = req.find("messages");
    if (it == req.end() || !it->is_array() || it->empty() ||
        !std::all_of(it->begin(), it->end(), [](const ojson& m) { return m.is_object() && m.contains("role") && m["role"].is_string(); }))
      bad_request("'messages' must be a non-empty list of {role, content} objects", "messages");
    if (!tmpl_ && !llava_) bad_request(fmt::format("model '{}' has no chat template (use /v1/completions)", id_), "messages");
    const ChatMessages cm = chat_messages(*it, chat_model());
    std::string text = tmpl_ ? tmpl_->render(cm.messages, true) : io::conv_prompt("vicuna_v1", cm.messages);
    const bool has_bos = tmpl_ && io::prompt_has_bos(text, tmpl_->bos_token());
    ChatPrompt p;
    if (llava_) {
      const auto n = static_cast<std::int64_t>(cm.images.size());
      if (const std::int64_t found = count_image_placeholders(text); found != n) {
        throw ConfigError(fmt::format("messages: <image> placeholders in the prompt (expected {}, one per image_url "
                                      "part, got {})", n, found));
      }
      p.images = std::make_shared<const LlavaImages>(preprocess_llava_images(llava_->lm, llava_->processor, cm.images));
      text = expand_images(text, p.images->counts);
    }
    p.ids = has_bos ? tok_.encode(text, false) : eval::prompt_ids(m_, tok_, text);
    return p;
  }

  ChatModel chat_model() const {
    ChatModel c;
    c.id = id_;
    c.architecture = m_.config().architecture;
    c.llava = llava_.has_value();
    c.typed_parts = llava_ && tmpl_;
    c.per_image = llava_ ? llava_->lm.config().features_per_image() : 0;
    c.context = m_.config().max_position_embeddings;
    return c;
  }

  // LLaVA: the prompt's image features in place of its image tokens (every prompt, as generate).
  eval::PrefillFn prefill_of(const ChatPrompt& p) const {
    if (!p.images) return {};
    return [this, p](model::KvCache& cache, MatrixF& logits) { llava_->lm.prefill(p.ids, p.images->inputs, cache, logits); };
  }

  void chat(const ojson& req, httplib::Response& res) {
    const ChatPrompt prompt = chat_prompt(req);
    const std::vector<std::int32_t>& ids = prompt.ids;
    const eval::PrefillFn prefill = prefill_of(prompt);
    const std::int64_t room = m_.config().max_position_embeddings - static_cast<std::int64_t>(ids.size());
    const std::int64_t max_tokens = int_or(req, "max_completion_tokens", int_or(req, "max_tokens", std::min<std::int64_t>(room, 256)));
    if (int_or(req, "n", 1) != 1) bad_request("'n' must be 1", "n");
    const eval::GenerateOptions g = generation(req, max_tokens, ids.size());
    const std::vector<std::string> stops = stop_strings(req);
    const std::string id = fmt::format("chatcmpl-{}", next_id());
    if (bool_or(req, "stream", false)) {
      sse(res, [this, ids, g, stops, id, prefill](const std::function<bool(const ojson&)>& send) {
        const auto chunk = [&](const ojson& delta, const ojson& finish) {
          return ojson{{"id", id}, {"object", "chat.completion.chunk"}, {"created", now()}, {"model", id_},
                       {"choices", ojson::array({{{"index", 0}, {"delta", delta}, {"finish_reason", finish}}})}};
        };
        send(chunk({{"role", "assistant"}, {"content", ""}}, nullptr));
        const Completion c = complete(ids, g, stops, [&](std::string_view piece) {
          return send(chunk({{"content", std::string(piece)}}, nullptr));
        }, prefill);
        send(chunk(ojson::object(), c.finish_reason));
      });
      return;
    }
    const Completion c = complete(ids, g, stops, {}, prefill);
    const auto n_prompt = static_cast<std::int64_t>(ids.size()), n_out = static_cast<std::int64_t>(c.tokens.size());
    const ojson out = {{"id", id}, {"object", "chat.completion"}, {"created", now()}, {"model", id_},
                       {"choices", ojson::array({{{"index", 0}, {"message", {{"role", "assistant"}, {"content", c.text}}},
                                                  {"finish_reason", c.finish_reason}}})},
                       {"usage", {{"prompt_tokens", n_prompt}, {"completion_tokens", n_out}, {"total_tokens", n_prompt + n_out}}}};
    res.set_content(out.dump(-1, ' ', false, ojson::error_handler_t::replace), "application/json");
  }

  static std::int64_t now() { return static_cast<std::int64_t>(std::time(nullptr)); }
  std::uint64_t next_id() {
    const std::lock_guard<std::mutex> lock(ids_);
    return ++counter_;
  }

  const model::Model& m_;
  const io::Tokenizer& tok_;
  std::optional<io::ChatTemplate> tmpl_;
  std::string id_;
  std::optional<LlavaParts> llava_;
  std::int64_t created_ = now();
  std::mutex compute_;  // held while the model runs: a batcher step, or the echo / logprobs forward
  std::mutex ids_;
  std::uint64_t counter_ = 0;
  Batcher batcher_;  // last: its thread stops (finishing the requests in flight) before the rest goes
};

// The KV budget: the plan's budget less everything but its dense KV cache (whose room the requests'
// caches share), and the bytes per position of the cache `mode` gives this model's layers.
BatchLimits batch_limits(const model::Model& m, const core::MemoryPlan& plan, int max_batch, model::KvCacheMode mode) {
  std::int64_t others = 0;
  for (const core::MemoryItem& item : plan.items)
    if (!item.name.starts_with("KV cache")) others += item.bytes;
  BatchLimits l;
  l.max_batch = max_batch;
  l.kv_cache = mode;
  l.kv_bytes = std::max<std::int64_t>(plan.budget - others, 0);
  l.bytes_per_token = model::KvCache(m, 1, mode).bytes_per_token();
  return l;
}

int g_stop_pipe[2] = {-1, -1};

extern "C" void on_stop_signal(int sig) {
  const char c = static_cast<char>(sig);
  [[maybe_unused]] const auto n = ::write(g_stop_pipe[1], &c, 1);
}

int run_serve(const ServeArgs& a) {
  if (a.port < 0 || a.port > 65535) throw ConfigError(fmt::format("--port (expected 0..65535, got {})", a.port));
  apply_run_options(a.run);
  const auto config = model::load_config(std::filesystem::path(a.model) / "config.json");
  if (a.max_batch < 1) throw ConfigError(fmt::format("--max-batch (expected >= 1, got {})", a.max_batch));
  const model::KvCacheMode kv_mode = model::parse_kv_cache_mode(a.kv_cache);
  const core::MemoryPlan plan = check_inference_memory("serve", a.model, a.max_memory, config.max_position_embeddings, a.run);
  // A LLaVA checkpoint serves its language model, with the vision tower for the chat images.
  std::optional<model::LlavaModel> llava;
  std::unique_ptr<model::Model> text_model;
  if (config.multimodal_architecture.empty()) text_model = model::Model::load(a.model, a.run.load());
  else llava.emplace(model::LlavaModel::load(a.model, a.run.load()));
  const model::Model& m = llava ? llava->language_model() : *text_model;
  const auto tok = model_tokenizer(a.model, m.config());
  const std::string id = a.name.empty() ? std::filesystem::path(a.model).lexically_normal().filename().string() : a.name;
  std::optional<LlavaParts> parts;
  if (llava) parts.emplace(LlavaParts{*llava, image::load_checkpoint_processor(a.model)});
  const BatchLimits limits = batch_limits(m, plan, a.max_batch, kv_mode);
  Server server(m, *tok, io::ChatTemplate::load(a.model), id.empty() ? "model" : id, limits, std::move(parts));
  const int conv = static_cast<int>(std::min<std::int64_t>(m.config().max_position_embeddings, 2048));
  std::fprintf(stderr, "serve: KV budget %s (--max-memory less the weights, one prompt's activations and the runtime), "
               "%s per position (--kv-cache %s): %lld concurrent %d-token conversations (--max-batch %d)\n",
               core::format_bytes(limits.kv_bytes).c_str(), core::format_bytes(limits.bytes_per_token).c_str(),
               a.kv_cache.c_str(), static_cast<long long>(server.batcher().slots(conv)), conv, limits.max_batch);

  // SIGTERM / SIGINT write a byte to a pipe (all a signal handler may safely do, in whichever thread the
  // signal lands); a waiter thread reads it and stops the server; listen() then returns once the requests
  // in flight are answered.
  if (::pipe(g_stop_pipe) != 0) throw IoError("serve: cannot create the stop pipe");
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  httplib::Server svr;
  server.routes(svr);
  const int port = a.port == 0 ? svr.bind_to_any_port(a.host) : (svr.bind_to_port(a.host, a.port) ? a.port : -1);
  if (port < 0) throw IoError(fmt::format("{}:{}: cannot listen (the address is in use or not local)", a.host, a.port));
  std::thread waiter([&] {
    char sig = 0;
    if (::read(g_stop_pipe[0], &sig, 1) == 1 && sig != 0 && !quiet())
      std::fprintf(stderr, "serve: signal %d: finishing the requests in flight\n", sig);
    svr.stop();
  });
  std::fprintf(stderr, "serve: %s as '%s' on http://%s:%d\n", a.model.c_str(), id.c_str(), a.host.c_str(), port);
  std::fflush(stderr);
  svr.listen_after_bind();
  const char zero = 0;  // a listen that ended by itself: release the waiter
  if (::write(g_stop_pipe[1], &zero, 1) != 1) std::fprintf(stderr, "serve: cannot release the stop thread\n");
  waiter.join();
  if (!quiet()) std::fprintf(stderr, "serve: stopped\n");
  return 0;
}

}  // namespace

Command add_serve(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  auto* sub = app.add_subcommand("serve", "Serve a checkpoint over an OpenAI-compatible HTTP API (/v1/completions, "
                                          "/v1/chat/completions, /v1/models, /health)");
  sub->add_option("--model", args->model, "Model directory (Hugging Face or latent checkpoint)")->required()->group("Input");
  sub->add_option("--host", args->host, "Address to listen on")->capture_default_str()->group("Server");
  sub->add_option("--port", args->port, "Port to listen on; 0 = any free port (printed on stderr)")
      ->capture_default_str()
      ->group("Server");
  sub->add_option("--served-model-name", args->name, "The model id clients name (default: the directory's name)")
      ->group("Server");
  sub->add_option("--max-memory", args->max_memory,
                  "Memory budget (e.g. 20G; default: physical memory - 2 GiB, or less when less is available now or a cgroup limits it) for the weights and the "
                  "requests' KV caches (at least one request at max_position_embeddings)")
      ->group("Run");
  sub->add_option("--max-batch", args->max_batch,
                  "Requests decoding at once (continuous batching; more wait in a queue, as do those whose KV cache "
                  "does not fit the budget now)")
      ->capture_default_str()
      ->group("Server");
  sub->add_option("--kv-cache", args->kv_cache,
                  "KV cache of a latent checkpoint: auto (latent where smaller and not slower), latent (every factored "
                  "k_proj / v_proj: the most concurrent requests in --max-memory) or dense")
      ->capture_default_str()
      ->group("Run");
  add_run_options(sub, args->run);
  add_weights_option(sub, args->run);
  return {sub, [args] { return run_serve(*args); }, Ranks::Root};
}

}  // namespace latentllm::cli
