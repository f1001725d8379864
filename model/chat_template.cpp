// Prompt templates; see chat_template.h.
#include "model/chat_template.h"

#include <stdexcept>

namespace pulse::model {

std::string PromptTemplate::render(const std::string& question) const {
  std::string out;
  out.reserve(format.size() + question.size() + system.size());
  for (size_t i = 0; i < format.size(); ++i) {
    const char c = format[i];
    if (c == '{' && i + 1 < format.size() && format[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < format.size() && format[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      const size_t end = format.find('}', i);
      if (end == std::string::npos)
        throw std::invalid_argument("prompt template: unclosed '{' at offset " + std::to_string(i));
      const std::string name = format.substr(i + 1, end - i - 1);
      if (name == "question") {
        out += question;
      } else if (name == "system") {
        out += system;
      } else {
        throw std::invalid_argument("prompt template: unknown placeholder {" + name +
                                    "} (known: {question}, {system}; write {{ for a literal brace)");
      }
      i = end;
    } else if (c == '}') {
      throw std::invalid_argument("prompt template: lone '}' at offset " + std::to_string(i) + " (write }})");
    } else {
      out += c;
    }
  }
  return out;
}

std::vector<std::string> PromptTemplate::preset_names() {
  return {"plain", "chatml", "llama2"};
}

PromptTemplate PromptTemplate::preset(const std::string& name) {
  PromptTemplate t;
  if (name == "plain") return t;
  if (name == "chatml") {
    t.format =
        "<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n<|im_start|>"
        "assistant\n";
    t.system = "You are a helpful assistant.";
    return t;
  }
  if (name == "llama2") {
    t.format = "[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{question} [/INST]";
    t.system = "You are a helpful assistant.";
    return t;
  }
  throw std::invalid_argument("prompt template: unknown preset \"" + name +
                              "\" (known: plain, chatml, llama2)");
}

}  // namespace pulse::model
