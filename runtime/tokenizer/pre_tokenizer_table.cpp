// The built-in pre-tokenizers, keyed by tokenizer.ggml.pre. The lists are llama.cpp's
// (src/llama-vocab.cpp, llm_tokenizer_bpe and the name -> type mapping). Where llama.cpp rewrote a
// Hugging Face regex for std::regex (case-insensitive groups spelled out, \p{Lu} emulated with
// look-aheads, possessive quantifiers dropped), the original tokenizer.json regex is used: PCRE2
// supports it and it is what the model was trained with. New vocabularies need no entry here:
// the converter writes tokenizer.kestrel.pre_regex.
#include <algorithm>

#include "tokenizer/pre_tokenizer.h"

namespace kestrel {
namespace {

// Shared regexes.
#define GPT2_RX R"RX('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))RX"
#define CONTRACTIONS_I R"RX((?i:'s|'t|'re|'ve|'m|'ll|'d))RX"
#define LLAMA3_RX CONTRACTIONS_I R"RX(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)RX"
#define QWEN2_RX CONTRACTIONS_I R"RX(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)RX"
#define O200K_RX                                                                                             \
  R"RX([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)RX" \
  R"RX(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)RX" \
  R"RX(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)RX"
#define CJK_KANA_RX R"RX([一-龥぀-ゟ゠-ヿ]+)RX"
#define DS3_MAIN_RX                                                                                \
  R"RX([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+)RX" \
  R"RX(| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)RX"
#define PORO_RX R"RX( ?[^(\s|.,!?…。，、।۔،)]+)RX"

const std::vector<PreTokenizerPreset>& presets() {
  static const std::vector<PreTokenizerPreset> table = {
      {"default",
       {R"RX([\p{P}\$\+<=>\^~\|]+)RX", GPT2_RX, R"RX(\p{N}+)RX", R"RX([0-9][0-9][0-9])RX"}},
      {"llama3,llama-v3,llama-bpe,falcon3,falcon-h1,pixtral,midm-2.0,lfm2,jina-v5-nano", {LLAMA3_RX}, true, true},
      {"dbrx,smaug-bpe", {LLAMA3_RX}},
      {"chatglm-bpe,glm4", {LLAMA3_RX}},
      {"jais-2",
       {CONTRACTIONS_I R"RX(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+)RX"
                       R"RX(|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S))RX"
                       R"RX(|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1})RX"}},
      {"deepseek-llm",
       {R"RX([\r\n])RX",
        R"RX(\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\x{1F7D}ᾀ-ᾴᾶ-ᾼ\x{1FBE}ῂ-ῄῆ-ῌῐ-\x{1FD3}ῖ-\x{1FDB}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\x{2126}ℨ\x{212A}-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+)RX",
        R"RX(\s?[!-/:-~！-／：-～‘-‟　-。]+)RX", R"RX(\s+$)RX", R"RX([一-龥ࠀ-一가-퟿]+)RX", R"RX(\p{N}+)RX"}},
      {"deepseek-v3,hunyuan-dense,joyai-llm,hy_v4", {R"RX(\p{N}{1,3})RX", CJK_KANA_RX, DS3_MAIN_RX}},
      {"spark2_5",
       {R"RX(\p{N}{1,3})RX", CJK_KANA_RX,
        R"RX([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+)RX"
        R"RX(| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+)RX",
        R"RX(\p{N})RX"}},
      {"youtu",
       {R"RX([가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+)RX",
        R"RX([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?)RX"
        R"RX(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?)RX"
        R"RX(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)RX"},
       true},
      {"deepseek-coder",
       {R"RX([\r\n])RX", R"RX(\s?\p{L}+)RX", R"RX(\s?\p{P}+)RX", R"RX([一-龥ࠀ-一가-퟿]+)RX", R"RX(\p{N})RX"}},
      {"falcon", {R"RX([\p{P}\$\+<=>\^~\|`]+)RX", GPT2_RX, R"RX([0-9][0-9][0-9])RX"}},
      {"starcoder,refact,command-r,smollm,codeshell,exaone,minerva-7b,mellum2", {R"RX(\p{N})RX", GPT2_RX}},
      {"gpt-2,phi-2,jina-es,jina-de,gigachat,jina-v2-es,jina-v2-de,a.x-4.0,mellum,modern-bert,mpt,olmo,jais,"
       "trillion,granite-docling,exaone4,jina-v1-en,jina-v2-code,roberta-bpe",
       {GPT2_RX}},
      {"qwen2,deepseek-r1-qwen,kormo,f2llmv2,stablelm2,hunyuan,solar-open,megrez,grok-2", {QWEN2_RX}},
      {"qwen35",
       {CONTRACTIONS_I R"RX(|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)RX"}},
      {"poro-chat,bloom,gpt3-finnish", {PORO_RX}},
      {"viking", {PORO_RX, R"RX(\p{N})RX"}},
      {"tekken",
       {R"RX([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+)RX"
        R"RX(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*)RX"
        R"RX(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)RX"},
       true, true},
      {"chameleon",
       {R"RX(<sentinel:[0-9]+>)RX", R"RX((IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z)RX", R"RX(([\t\n]|    |  ))RX",
        R"RX(\p{N})RX", R"RX([\p{P}!-/:-@\[-`{-~])RX", GPT2_RX},
       false, true},
      {"gpt-4o,llama4,kanana2,talkie,minimax-m2", {O200K_RX}, true},
      {"granite-embed-multi-97m",
       {R"RX([^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))*((?=[\p{L}\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?)RX"
        R"RX(|[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))+((?=[\p{L}\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?)RX"
        R"RX(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)RX"},
       true},
      {"tiny_aya,cohere2moe", {R"RX(\d{1,3}(?=(?:\d{3})*\b))RX", O200K_RX}},
      {"superbpe", {R"RX(\p{N}+)RX", R"RX((?=(\d{3})+(?!\d)))RX"}},
      {"bailingmoe,bailingmoe2,llada-moe",
       {R"RX('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)RX"}},
      {"seed-coder",
       {CONTRACTIONS_I R"RX(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)RX"}},
      {"ufakzeka", {R"RX([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)RX"}},
      {"laguna", {R"RX([^\n]+|[\n]+)RX", QWEN2_RX}},
      {"exaone-moe",
       {CONTRACTIONS_I R"RX(|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?)RX"
                       R"RX(|\s*[\r\n]|\s+(?!\S)|\s+)RX"}},
      {"minicpm5",
       {R"RX(\p{N}{1,3})RX",
        CONTRACTIONS_I R"RX(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)RX"},
       true},
  };
  return table;
}

bool name_in_list(std::string_view list, std::string_view name) {
  for (size_t pos = 0; pos <= list.size();) {
    size_t comma = list.find(',', pos);
    if (comma == std::string_view::npos) comma = list.size();
    if (list.substr(pos, comma - pos) == name) return true;
    pos = comma + 1;
  }
  return false;
}

}  // namespace

const PreTokenizerPreset* find_pre_tokenizer_preset(std::string_view name) {
  if (name.empty()) name = "default";  // llama.cpp: a missing pre-tokenizer means "default"
  for (const PreTokenizerPreset& p : presets())
    if (name_in_list(p.names, name)) return &p;
  return nullptr;
}

std::vector<std::string> pre_tokenizer_preset_names() {
  std::vector<std::string> out;
  for (const PreTokenizerPreset& p : presets()) {
    std::string_view list = p.names;
    for (size_t pos = 0; pos <= list.size();) {
      size_t comma = list.find(',', pos);
      if (comma == std::string_view::npos) comma = list.size();
      out.emplace_back(list.substr(pos, comma - pos));
      pos = comma + 1;
    }
  }
  return out;
}

}  // namespace kestrel
