# tokenizer.json and tokenizer_config.json, read by prepare-data --tokenizer: byte-level BPE (the
# gpt2_style and qwen2_style fixtures) and the SentencePiece family (llama2_style).

# tok_case NAME FIXTURE JQ_FILTER REGEX [TEXT]: the fixture's tokenizer with tokenizer.json
# changed by JQ_FILTER, encoding one {"text": TEXT} sample; expects exit $WANT (default 1) and REGEX.
tok_case() {
  local name=$1 fixture=$2 filter=$3 regex=$4 text=${5:-hello world 123}
  begin "$name" || return 0
  cp -r "$fixtures/tokenizer/$fixture" "$W/tok"
  jq_edit "$W/tok/tokenizer.json" "$filter"
  jq -cn --arg t "$text" '{text: $t}' > "$W/s.jsonl"
  expect "$name" "${WANT:-1}" "$regex" -- prepare-data s.jsonl --tokenizer tok --out out/d
}

# tok_raw_case NAME FIXTURE REGEX: tokenizer.json replaced by $W/raw (written by the caller).
tok_raw_case() {
  local name=$1 fixture=$2 regex=$3
  cp -r "$fixtures/tokenizer/$fixture" "$W/tok"
  cp "$W/raw" "$W/tok/tokenizer.json" && rm "$W/raw"
  echo '{"text": "hello world"}' > "$W/s.jsonl"
  expect "$name" 1 "$regex" -- prepare-data s.jsonl --tokenizer tok --out out/d
}

# The model's vocabulary and merges.
tok_case tok_vocab_is_array gpt2_style '.model.vocab = []' 'tokenizer.json.*model.vocab'
tok_case tok_vocab_id_negative gpt2_style '.model.vocab["Ġ"] = -5' 'model.vocab.*-5'
tok_case tok_vocab_id_fraction gpt2_style '.model.vocab["Ġ"] = 1.5' 'model.vocab.*1.5'
tok_case tok_vocab_id_string gpt2_style '.model.vocab["Ġ"] = "7"' 'model.vocab.*"7"'
tok_case tok_vocab_two_tokens_one_id gpt2_style '.model.vocab["zzqqzz"] = 5' \
  'model.vocab.*(id 5|5).*(twice|both|two|already)'
tok_case tok_merge_of_unknown_token gpt2_style '.model.merges += [["qqq", "zzz"]]' \
  'model.merges\[1792\].*qqq'
tok_case tok_merge_result_not_in_vocab gpt2_style \
  '.model.merges[0] as $m | .model.vocab |= del(.[$m[0] + $m[1]])' \
  'model.merges\[0\].*ĠĠ'
tok_case tok_merge_three_parts gpt2_style '.model.merges[0] = ["a", "b", "c"]' 'model.merges\[0\]'
tok_case tok_merge_string_without_space gpt2_style '.model.merges[0] = "ab"' 'model.merges\[0\]'
tok_case tok_merges_is_object gpt2_style '.model.merges = {}' 'model.merges'
tok_case tok_merge_is_number gpt2_style '.model.merges[3] = 17' 'model.merges\[3\]'
tok_case tok_model_unigram gpt2_style '.model.type = "Unigram"' 'model.type.*Unigram'
tok_case tok_model_missing gpt2_style 'del(.model)' 'tokenizer.json.*model'
tok_case tok_model_type_number gpt2_style '.model.type = 3' 'model.type'
tok_case tok_byte_fallback_string llama2_style '.model.byte_fallback = "true"' \
  'model.byte_fallback.*"true"'
tok_case tok_unk_token_not_in_vocab llama2_style '.model.unk_token = "<nope>"' \
  'unk_token.*<nope>' 'hello ☃ world'
tok_case tok_dropout_set gpt2_style '.model.dropout = 0.5' 'model.dropout.*0.5'
tok_case tok_continuing_prefix gpt2_style '.model.continuing_subword_prefix = "##"' \
  'continuing_subword_prefix.*##'
# Added tokens.
tok_case tok_added_id_beyond_int32 gpt2_style '.added_tokens[0].id = 4294967296' \
  'added_tokens\[0\].id.*4294967296'
tok_case tok_added_id_negative gpt2_style '.added_tokens[1].id = -1' 'added_tokens\[1\].id.*-1'
# tokenizers skips an added token with empty content; the config's bos_token then names no token.
tok_case tok_added_content_empty gpt2_style '.added_tokens[0].content = ""' \
  'added_tokens\[0\].content|bos_token.*no token of tok/tokenizer.json'
tok_case tok_added_content_number gpt2_style '.added_tokens[0].content = 5' \
  'added_tokens\[0\].*"content":5'
tok_case tok_added_special_string gpt2_style '.added_tokens[0].special = "yes"' \
  'added_tokens\[0\].special.*yes'
tok_case tok_added_tokens_object gpt2_style '.added_tokens = {"a": 1}' 'added_tokens'
tok_case tok_added_entry_number gpt2_style '.added_tokens[2] = 9' 'added_tokens\[2\]'
# tokenizers keeps the first of two added tokens with one content, as Kelvin does.
WANT=0 tok_case tok_added_same_content_twice gpt2_style \
  '.added_tokens += [(.added_tokens[0] | .id = 2051)]' 'wrote'
# Normalizers.
tok_case tok_normalizer_nfkd gpt2_style '.normalizer = {"type": "NFKD"}' 'normalizer.*NFKD'
tok_case tok_normalizer_lowercase gpt2_style '.normalizer = {"type": "Lowercase"}' \
  'normalizer.*Lowercase'
tok_case tok_normalizer_regex_replace llama2_style \
  '.normalizer.normalizers[1].pattern = {"Regex": "(a+)+$"}' 'normalizer.normalizers\[1\]'
tok_case tok_normalizer_sequence_number llama2_style '.normalizer.normalizers = 5' \
  'normalizer.normalizers'
tok_case tok_prepend_number llama2_style '.normalizer.normalizers[0].prepend = 7' \
  'normalizer.normalizers\[0\]'
tok_case tok_normalizer_no_type gpt2_style '.normalizer = {"kind": "NFC"}' 'normalizer'
# Pre-tokenizers and their regexes.
tok_case tok_split_regex_unbalanced qwen2_style '.pre_tokenizer.pretokenizers[0].pattern.Regex = "(ab"' \
  'pretokenizers\[0\].*\(ab'
tok_case tok_split_regex_lookbehind qwen2_style \
  '.pre_tokenizer.pretokenizers[0].pattern.Regex = "(?<=a+)b"' 'pretokenizers\[0\]'
tok_case tok_split_regex_exponential qwen2_style \
  '.pre_tokenizer.pretokenizers[0].pattern.Regex = "(a|aa)+$"' 'pretokenizers\[0\].*a\|aa' \
  "$(printf 'a%.0s' {1..60})b"
# A recursive group over a long text: bounded, and within the bound it matches.
WANT=0 tok_case tok_split_regex_recursion qwen2_style \
  '.pre_tokenizer.pretokenizers[0].pattern.Regex = "(a(?1)?b)"' 'wrote' \
  "$(printf 'a%.0s' {1..3000})"
tok_case tok_split_behavior_removed qwen2_style '.pre_tokenizer.pretokenizers[0].behavior = "Removed"' \
  'pretokenizers\[0\].behavior.*Removed'
tok_case tok_split_invert qwen2_style '.pre_tokenizer.pretokenizers[0].invert = true' \
  'pretokenizers\[0\].invert'
tok_case tok_split_string_pattern qwen2_style \
  '.pre_tokenizer.pretokenizers[0].pattern = {"String": " "}' 'pretokenizers\[0\].pattern'
# A PCRE2 callout: Kelvin sets no callout function, so it matches as "ab".
WANT=0 tok_case tok_split_callout qwen2_style '.pre_tokenizer.pretokenizers[0].pattern.Regex = "a(?C1)b"' \
  'wrote'
tok_case tok_pretokenizer_whitespace gpt2_style '.pre_tokenizer = {"type": "Whitespace"}' \
  'pre_tokenizer.*Whitespace'
tok_case tok_bytelevel_prefix_space gpt2_style '.pre_tokenizer.add_prefix_space = true' \
  'pre_tokenizer.add_prefix_space'
tok_case tok_pretokenizers_string qwen2_style '.pre_tokenizer.pretokenizers = "Split"' \
  'pre_tokenizer.pretokenizers'
tok_case tok_metaspace_two_chars metaspace_style '.pre_tokenizer.replacement = "ab"' \
  'pre_tokenizer.replacement.*ab'
tok_case tok_metaspace_scheme_bad metaspace_style '.pre_tokenizer.prepend_scheme = "sometimes"' \
  'prepend_scheme.*sometimes'
tok_case tok_metaspace_split_string metaspace_style '.pre_tokenizer.split = "no"' \
  'pre_tokenizer.split.*no'
# Decoders.
tok_case tok_decoder_wordpiece gpt2_style '.decoder = {"type": "WordPiece"}' 'decoder.*WordPiece'
tok_case tok_decoder_strip_negative llama2_style '.decoder.decoders[3].start = -1' \
  'decoder.decoders\[3\].start'
tok_case tok_decoder_strip_huge llama2_style '.decoder.decoders[3].start = 1e30' \
  'decoder.decoders\[3\].start'
tok_case tok_decoder_replace_regex llama2_style '.decoder.decoders[0].pattern = {"Regex": "x+"}' \
  'decoder.decoders\[0\]'
# Truncation and padding: transformers turns both off unless a call asks for them, as Kelvin's
# encoding never applies them.
WANT=0 tok_case tok_truncation_set gpt2_style '.truncation = {"max_length": 4, "strategy": "LongestFirst", "stride": 0, "direction": "Right"}' \
  'wrote'
WANT=0 tok_case tok_padding_set gpt2_style '.padding = {"strategy": {"Fixed": 64}, "direction": "Right", "pad_to_multiple_of": null, "pad_id": 0, "pad_type_id": 0, "pad_token": "!"}' \
  'wrote'
# The file itself.
if begin tok_file_empty; then : > "$W/raw"; tok_raw_case tok_file_empty gpt2_style 'tokenizer.json'; fi
if begin tok_file_truncated; then
  head -c 3000 "$fixtures/tokenizer/gpt2_style/tokenizer.json" > "$W/raw"
  tok_raw_case tok_file_truncated gpt2_style 'tokenizer.json'
fi
if begin tok_file_top_array; then echo '[]' > "$W/raw"; tok_raw_case tok_file_top_array gpt2_style 'tokenizer.json'; fi
if begin tok_file_invalid_utf8; then
  sed 's/"Ġ":/"\xff\xfe":/' "$fixtures/tokenizer/gpt2_style/tokenizer.json" > "$W/raw"
  tok_raw_case tok_file_invalid_utf8 gpt2_style 'tokenizer.json.*(UTF-8|utf-8)'
fi
if begin tok_file_deep_nesting; then
  { printf '{"version": "1.0", "extra": '; head -c 200000 /dev/zero | tr '\0' '['
    head -c 200000 /dev/zero | tr '\0' ']'; printf '}'; } > "$W/raw"
  tok_raw_case tok_file_deep_nesting gpt2_style 'tokenizer.json.*(deep|nest)'
fi
if begin tok_file_duplicate_key; then
  sed '0,/"normalizer": null,/s//"normalizer": null, "normalizer": {"type": "NFKC"},/' \
    "$fixtures/tokenizer/gpt2_style/tokenizer.json" > "$W/raw"
  tok_raw_case tok_file_duplicate_key gpt2_style 'tokenizer.json.*normalizer.*(twice|more than once)'
fi
if begin tok_file_is_directory; then
  cp -r "$fixtures/tokenizer/gpt2_style" "$W/tok" && rm "$W/tok/tokenizer.json"
  mkdir "$W/tok/tokenizer.json"
  echo '{"text": "hi"}' > "$W/s.jsonl"
  expect tok_file_is_directory 1 'tokenizer.json.*(directory|not a regular file)' -- \
    prepare-data s.jsonl --tokenizer tok --out out/d
fi
if begin tok_file_fifo; then
  cp -r "$fixtures/tokenizer/gpt2_style" "$W/tok" && rm "$W/tok/tokenizer.json"
  mkfifo "$W/tok/tokenizer.json"
  echo '{"text": "hi"}' > "$W/s.jsonl"
  expect tok_file_fifo 1 'tokenizer.json.*(not a regular file|FIFO|fifo)' -- \
    prepare-data s.jsonl --tokenizer tok --out out/d
fi
if begin tok_dir_is_the_file; then
  echo '{"text": "hi"}' > "$W/s.jsonl"
  cp "$fixtures/tokenizer/gpt2_style/tokenizer.json" "$W/tokenizer.json"
  expect tok_dir_is_the_file 1 'tokenizer.json.*(directory|not a directory)' -- \
    prepare-data s.jsonl --tokenizer tokenizer.json --out out/d
fi
if begin tok_dir_without_tokenizer; then
  mkdir "$W/tok" && echo '{"text": "hi"}' > "$W/s.jsonl"
  expect tok_dir_without_tokenizer 1 'tok.*tokenizer.json' -- \
    prepare-data s.jsonl --tokenizer tok --out out/d
fi
# tokenizer_config.json.
# tc_case NAME JQ_FILTER REGEX: gpt2_style with tokenizer_config.json changed, one text sample.
tc_case() {
  local name=$1 filter=$2 regex=$3
  begin "$name" || return 0
  cp -r "$fixtures/tokenizer/gpt2_style" "$W/tok"
  jq_edit "$W/tok/tokenizer_config.json" "$filter"
  echo '{"text": "hello world"}' > "$W/s.jsonl"
  expect "$name" "${WANT:-1}" "$regex" -- prepare-data s.jsonl --tokenizer tok --out out/d
}
tc_case tc_bos_not_a_token '.bos_token = "<nope>"' 'bos_token.*<nope>'
tc_case tc_bos_number '.bos_token = 5' 'bos_token.*5'
tc_case tc_eos_object_without_content '.eos_token = {"__type": "AddedToken"}' 'eos_token'
# Kelvin's text samples are BOS + text + EOS whatever add_bos_token says (data.md).
WANT=0 tc_case tc_add_bos_string '.add_bos_token = "yes"' 'wrote'
tc_case tc_config_array '[]' 'tokenizer_config.json'
