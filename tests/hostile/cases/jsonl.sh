# prepare-data's JSON Lines samples: chat messages, text, prompt/completion and token-id lines,
# with the gpt2_style tokenizer and its ChatML template; then the command's own options.

# jl_case NAME EXIT REGEX LINE...: a samples file of the given lines (printf %b: escapes allowed).
jl_case() {
  local name=$1 want=$2 regex=$3
  shift 3
  begin "$name" || return 0
  cp -r "$fixtures/tokenizer/gpt2_style" "$W/tok"
  local line
  for line in "$@"; do printf '%b\n' "$line"; done > "$W/s.jsonl"
  expect "$name" "$want" "$regex" -- prepare-data s.jsonl --tokenizer tok --out out/d
}
user='{"role": "user", "content": "hi"}'
bot='{"role": "assistant", "content": "yo"}'

# Messages.
jl_case jl_role_number 1 's.jsonl:1: .*role.*5' "{\"messages\": [{\"role\": 5, \"content\": \"hi\"}, $bot]}"
jl_case jl_role_missing 1 's.jsonl:1: .*role' "{\"messages\": [{\"content\": \"hi\"}, $bot]}"
jl_case jl_role_empty 1 's.jsonl:1: .*role' "{\"messages\": [{\"role\": \"\", \"content\": \"hi\"}, $bot]}"
jl_case jl_role_tool_reply 0 'wrote' \
  "{\"messages\": [$user, {\"role\": \"tool\", \"content\": \"42\"}, $bot]}"
jl_case jl_content_number 1 's.jsonl:1: .*content.*7' "{\"messages\": [{\"role\": \"user\", \"content\": 7}, $bot]}"
jl_case jl_content_object 1 's.jsonl:1: .*content' \
  "{\"messages\": [{\"role\": \"user\", \"content\": {\"a\": 1}}, $bot]}"
jl_case jl_content_null_user 1 's.jsonl:1: .*content' \
  "{\"messages\": [{\"role\": \"user\", \"content\": null}, $bot]}"
jl_case jl_content_list_of_parts 1 's.jsonl:1: .*content' \
  "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"hi\"}]}, $bot]}"
jl_case jl_messages_empty 1 's.jsonl:1: .*messages' '{"messages": []}'
jl_case jl_messages_string 1 's.jsonl:1: .*messages' '{"messages": "hi"}'
jl_case jl_message_is_number 1 's.jsonl:1: .*messages"\[0\]' "{\"messages\": [5, $bot]}"
jl_case jl_no_assistant_turn 1 's.jsonl:1: .*assistant' "{\"messages\": [$user]}"
jl_case jl_tool_calls_string 1 's.jsonl:1: .*tool_calls' \
  "{\"messages\": [$user, {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": \"f()\"}]}"
jl_case jl_tools_number 1 's.jsonl:1: .*tools' "{\"messages\": [$user, $bot], \"tools\": 5}"
jl_case jl_messages_and_text 1 's.jsonl:1: .*(messages|text)' "{\"messages\": [$user, $bot], \"text\": \"x\"}"
jl_case jl_second_line_bad 1 's.jsonl:2: ' "{\"messages\": [$user, $bot]}" '{"messages": [1]}'
# Text and prompt/completion.
jl_case jl_text_number 1 's.jsonl:1: .*text' '{"text": 5}'
jl_case jl_text_null 1 's.jsonl:1: .*text' '{"text": null}'
jl_case jl_prompt_without_completion 1 's.jsonl:1: .*completion' '{"prompt": "a"}'
jl_case jl_completion_list 1 's.jsonl:1: .*completion' '{"prompt": "a", "completion": ["b"]}'
jl_case jl_lone_surrogate 1 's.jsonl:1: ' '{"text": "a\\ud800b"}'
jl_case jl_text_with_nul_escape 0 'wrote' '{"text": "a\\u0000b"}'
# Token ids.
# Token ids are the model's, which may have more than the tokenizer: the summary names the size.
jl_case jl_ids_beyond_the_tokenizer 0 "the model's vocab_size must be above 999999" '{"input_ids": [1, 999999]}'
jl_case jl_ids_negative 1 's.jsonl:1: .*-3' '{"input_ids": [1, -3]}'
jl_case jl_ids_fraction 1 's.jsonl:1: .*input_ids' '{"input_ids": [1, 2.5]}'
jl_case jl_ids_huge_exponent 1 's.jsonl:1: .*1e999' '{"input_ids": [1, 1e999]}'
jl_case jl_ids_empty 1 's.jsonl:1: .*input_ids' '{"input_ids": []}'
jl_case jl_labels_shorter 1 's.jsonl:1: .*labels' '{"input_ids": [1, 2, 3], "labels": [-100, 2]}'
jl_case jl_labels_minus_five 1 's.jsonl:1: .*labels.*-5' '{"input_ids": [1, 2, 3], "labels": [-5, 2, 3]}'
jl_case jl_loss_mask_two 1 's.jsonl:1: .*loss_mask' '{"input_ids": [1, 2, 3], "loss_mask": [0, 2, 1]}'
jl_case jl_labels_and_loss_mask 1 's.jsonl:1: .*(labels|loss_mask)' \
  '{"input_ids": [1, 2], "labels": [-100, 2], "loss_mask": [0, 1]}'
jl_case jl_labels_all_ignored 1 's.jsonl.*training target.*labels' '{"input_ids": [1, 2], "labels": [-100, -100]}'
# The file's bytes.
jl_case jl_invalid_utf8 1 's.jsonl:1: .*UTF-8' '{"text": "a\xff\xfeb"}'
jl_case jl_raw_nul_byte 1 's.jsonl:1: ' '{"text": "a\x00b"}'
jl_case jl_raw_control_char 1 's.jsonl:1: ' '{"text": "a\x01b"}'
# A UTF-8 byte order mark before the first line is skipped, as Python's utf-8-sig reads it.
jl_case jl_byte_order_mark 0 'wrote' '\xef\xbb\xbf{"text": "a"}'
jl_case jl_trailing_garbage 1 's.jsonl:1: ' '{"text": "a"} x'
jl_case jl_two_objects 1 's.jsonl:1: ' '{"text": "a"}{"text": "b"}'
jl_case jl_not_an_object 1 's.jsonl:1: ' '["text", "a"]'
jl_case jl_blank_lines_only 1 's.jsonl.*no sample' '' '   ' ''
jl_case jl_crlf_lines 0 'wrote' '{"text": "a"}\r' '{"text": "b"}\r'
jl_case jl_deep_in_tools 1 's.jsonl:1: .*(deep|nest)' \
  "{\"messages\": [$user, $bot], \"tools\": $(printf '[%.0s' {1..70})$(printf ']%.0s' {1..70})}"
if begin jl_file_empty; then
  : > "$W/s.jsonl"
  expect jl_file_empty 1 "the samples file 's.jsonl' has no sample" -- \
    prepare-data s.jsonl --tokenizer "$fixtures/tokenizer/gpt2_style" --out out/d
fi
if begin jl_line_without_newline_at_end_cut; then
  printf '{"text": "a"}\n{"text": "b' > "$W/s.jsonl"
  expect jl_line_without_newline_at_end_cut 1 's.jsonl:2: ' -- \
    prepare-data s.jsonl --tokenizer "$fixtures/tokenizer/gpt2_style" --out out/d
fi
if begin jl_huge_line; then
  { printf '{"text": "'; head -c 10000000 /dev/zero | tr '\0' 'a'; printf '"}\n'; } > "$W/s.jsonl"
  expect jl_huge_line 0 'wrote|line 1' -- \
    prepare-data s.jsonl --tokenizer "$fixtures/tokenizer/gpt2_style" --out out/d
fi
# The command's options and paths.
if begin jl_samples_is_directory; then
  mkdir "$W/s.jsonl"
  expect jl_samples_is_directory 1 's.jsonl.*directory' -- prepare-data s.jsonl --out out/d
fi
if begin jl_samples_fifo; then
  mkfifo "$W/s.jsonl"
  expect jl_samples_fifo 1 's.jsonl.*(regular file|FIFO|fifo)' -- prepare-data s.jsonl --out out/d
fi
if begin jl_samples_missing; then
  expect jl_samples_missing 1 'nope.jsonl.*(no such|does not exist|not found)' -- \
    prepare-data nope.jsonl --out out/d
fi
if begin jl_out_under_a_file; then
  echo '{"input_ids": [1, 2]}' > "$W/s.jsonl" && echo x > "$W/f"
  expect jl_out_under_a_file 1 'f/d.*(not a directory|is a file)' -- prepare-data s.jsonl --out f/d
fi
if begin jl_out_ends_with_slash; then
  echo '{"input_ids": [1, 2]}' > "$W/s.jsonl" && mkdir "$W/o"
  expect jl_out_ends_with_slash 2 'out.*o/' -- prepare-data s.jsonl --out o/
fi
if begin jl_out_is_samples_prefix; then
  echo '{"input_ids": [1, 2]}' > "$W/s.bin"
  expect jl_out_is_samples_prefix 1 's.bin' -- prepare-data s.bin --out s
fi
if begin jl_chat_date_impossible; then
  echo '{"input_ids": [1, 2]}' > "$W/s.jsonl"
  expect jl_chat_date_impossible 2 'chat-date.*2026-13-45' -- \
    prepare-data s.jsonl --out out/d --chat-date 2026-13-45
fi
if begin jl_chat_date_feb30; then
  echo '{"input_ids": [1, 2]}' > "$W/s.jsonl"
  expect jl_chat_date_feb30 2 'chat-date.*2026-02-30' -- \
    prepare-data s.jsonl --out out/d --chat-date 2026-02-30
fi
if begin jl_chat_date_empty; then
  echo '{"input_ids": [1, 2]}' > "$W/s.jsonl"
  expect jl_chat_date_empty 2 'chat-date' -- prepare-data s.jsonl --out out/d --chat-date=
fi
if begin jl_text_without_tokenizer; then
  echo '{"text": "a"}' > "$W/s.jsonl"
  expect jl_text_without_tokenizer 1 's.jsonl:1: .*--tokenizer' -- prepare-data s.jsonl --out out/d
fi
