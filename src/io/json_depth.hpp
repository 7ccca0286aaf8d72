// A nesting limit for the JSON files we read (config.json, tokenizer files, shard indexes).
// nlohmann's parser is iterative, but copying, dumping and comparing a document recurse once per
// level, so a hostile file of a million '[' would overflow the stack long after parsing succeeded.
#pragma once

#include "latentllm/io.hpp"  // check_json_depth, kMaxJsonDepth: public, for the server's request bodies


