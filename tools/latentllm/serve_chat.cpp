// The messages of an OpenAI chat request (serve_chat.hpp).
#include "serve_chat.hpp"

#include <fmt/format.h>

#include "latentllm/error.hpp"
#include "latentllm/multimodal.hpp"

namespace latentllm::cli {
namespace {

using ojson = nlohmann::ordered_json;

// ConfigError for a content part that is neither OpenAI's text part nor its image_url part.
[[noreturn]] void bad_part(const ojson& part, const std::string& at) {
  throw ConfigError(fmt::format("{}: content part (expected {{\"type\": \"text\", \"text\": ...}} or {{\"type\": "
                                "\"image_url\", \"image_url\": {{\"url\": ...}}}}, got {})", at,
                                part.dump(-1, ' ', false, ojson::error_handler_t::replace)));
}

// One image_url part (OpenAI's {"url": ..., "detail": ...}): its data URL decoded.
image::RgbImage image_part(const ojson& part, const std::string& at, const ChatModel& model) {
  if (!model.llava) {
    throw ConfigError(fmt::format("{}: an image for model '{}', which reads text only (expected a LLaVA checkpoint, "
                                  "got {})", at, model.id, model.architecture));
  }
  const auto it = part.find("image_url");
  const ojson url = it == part.end() ? ojson() : it->is_object() ? it->value("url", ojson()) : *it;
  if (!url.is_string()) bad_part(part, at);
  return image::decode_data_url(url.get<std::string>(), at + ".image_url");
}

ojson content_parts(const ojson& parts, const std::string& where, const ChatModel& model,
                    std::vector<image::RgbImage>& images) {
  ojson typed = ojson::array();
  std::string flat;
  bool after_text = false;
  for (std::size_t j = 0; j < parts.size(); ++j) {
    const std::string at = fmt::format("{}[{}]", where, j);
    const ojson& p = parts[j];
    const ojson type = p.is_object() ? p.value("type", ojson()) : ojson();
    if (type == "text" && p.contains("text") && p["text"].is_string()) {
      typed.push_back({{"type", "text"}, {"text", p["text"]}});
      flat += (after_text ? "\n" : "") + p["text"].get<std::string>();
      after_text = true;
    } else if (type == "image_url") {
      images.push_back(image_part(p, at, model));
      typed.push_back({{"type", "image"}});
      flat += (after_text ? "\n" : "") + std::string(model::kImageToken) + "\n";
      after_text = false;
    } else {
      bad_part(p, at);
    }
  }
  if (model.typed_parts) return typed;
  return flat;
}

// Refuses more image parts than the context holds at per_image tokens each (NeXT adds its grid's tokens
// to those of the base image), before any is decoded.
void check_image_count(const ojson& messages, const ChatModel& model) {
  if (!model.llava) return;
  std::int64_t n = 0;
  for (const ojson& m : messages) {
    const auto content = m.find("content");
    if (content == m.end() || !content->is_array()) continue;
    for (const ojson& p : *content) n += p.is_object() && p.value("type", ojson()) == "image_url" ? 1 : 0;
  }
  if (n * model.per_image > model.context) {
    throw ConfigError(fmt::format("messages: {} images (expected at most {}: each takes at least {} of the "
                                  "max_position_embeddings = {} tokens)", n, model.context / model.per_image,
                                  model.per_image, model.context));
  }
}

}  // namespace

ChatMessages chat_messages(const ojson& messages, const ChatModel& model) {
  check_image_count(messages, model);
  ChatMessages out;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    ojson m = messages[i];
    auto content = m.find("content");
    if (content != m.end() && content->is_array())
      *content = content_parts(*content, fmt::format("messages[{}].content", i), model, out.images);
    else if (content != m.end() && content->is_string() && model.typed_parts)  // llava-hf templates iterate parts
      *content = ojson::array({{{"type", "text"}, {"text", *content}}});
    out.messages.push_back(std::move(m));
  }
  return out;
}

}  // namespace latentllm::cli
