// The messages of an OpenAI chat request (`serve`'s /v1/chat/completions) as the prompt builders take
// them: OpenAI's content parts checked, text and image_url parts turned into a chat template's typed parts
// or one string for LLaVA's conversation modes, and the images of the image_url parts decoded in memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "latentllm/chat.hpp"
#include "latentllm/image.hpp"

namespace latentllm::cli {

// What the served model takes.
struct ChatModel {
  std::string id;            // the model id clients name (in messages)
  std::string architecture;  // its language model's, for a text-only model's error
  bool llava = false;        // a LLaVA checkpoint: image_url parts are taken
  bool typed_parts = false;  // a LLaVA checkpoint with a chat template: content as typed parts
  std::int64_t per_image = 0;  // the fewest tokens an image takes (LlavaConfig::features_per_image)
  std::int64_t context = 0;    // max_position_embeddings
};

// The messages and the images of their image_url parts, in order.
struct ChatMessages {
  io::Messages messages = io::Messages::array();
  std::vector<image::RgbImage> images;
};

// Each message's content as the prompt takes it: a list of OpenAI parts ({"type": "text", "text": ...},
// {"type": "image_url", "image_url": {"url": "data:...;base64,..."}}, detail ignored) becomes typed parts
// ({"type": "text"}, {"type": "image"}, as llava-hf's processors take them) when typed_parts, else one
// string of the parts in order: "<image>\n" per image (LLaVA's conversation modes) and the texts, a
// newline after each text that a part follows; a string content becomes one text part when typed_parts.
// ConfigError for a part of another form, an image for a text-only model, more image parts than the
// context could hold (checked before any image is decoded), and image::decode_data_url's errors
// (docs/ERRORS.md, "Chat requests").
ChatMessages chat_messages(const nlohmann::ordered_json& messages, const ChatModel& model);

}  // namespace latentllm::cli
