// Plain prompt templates with {placeholders}; no Jinja. The presets write the usual role markers.
#pragma once
#include <string>
#include <vector>

namespace pulse::model {

/// format holds literal text and the placeholders {question} and {system}; "{{" and "}}" write literal
/// braces. The question is substituted verbatim (never re-scanned), so braces inside it are safe.
struct PromptTemplate {
  std::string format = "{question}";
  std::string system;  ///< text for {system}

  /// Renders the prompt. Throws std::invalid_argument naming an unknown placeholder or a lone brace.
  std::string render(const std::string& question) const;

  /// Named presets:
  ///   "plain"  : "{question}"
  ///   "chatml" : "<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n
  ///               <|im_start|>assistant\n" (Qwen2/2.5 instruct; system "You are a helpful assistant.")
  ///   "llama2" : "[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{question} [/INST]" (BOS is added by the tokenizer)
  /// Throws std::invalid_argument listing the known names.
  static PromptTemplate preset(const std::string& name);
  static std::vector<std::string> preset_names();
};

}  // namespace pulse::model
