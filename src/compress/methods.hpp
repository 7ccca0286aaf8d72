// What the method registry (methods.cpp) tells the rest of compress beyond latentllm/compress.hpp.
#pragma once

#include "latentllm/compress.hpp"

namespace latentllm::compress {

// Whether the method has joint parts (CompressOptions::joint is read: its row reads "joint").
bool has_joint_parts(Method m);
// --preset default's settings of the method's row beyond the paper's protocol (none for most baselines;
// sparsegpt: its published damping).
void apply_default_preset(Method m, CompressOptions& o);

}  // namespace latentllm::compress
