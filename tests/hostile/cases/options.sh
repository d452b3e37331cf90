# The forward-only commands' options: generate, eval and convert with values of the wrong type,
# empty, negative or huge; missing files, directories for files and files for directories.

# opt_case NAME EXIT REGEX ARGS...: kelvin ARGS in a fresh directory, the text model at $W/model.
opt_case() {
  local name=$1 want=$2 regex=$3
  shift 3
  begin "$name" || return 0
  text_model_setup
  ln -s "$text_model" "$W/model"
  expect "$name" "$want" "$regex" -- "$@"
}
gen=(generate model --prompt "hello world")
# generate: numbers.
opt_case gen_max_new_tokens_negative 2 'max-new-tokens.*-1' "${gen[@]}" --max-new-tokens -1
opt_case gen_max_new_tokens_zero 2 'max-new-tokens.*0' "${gen[@]}" --max-new-tokens 0
opt_case gen_max_new_tokens_fraction 2 'max-new-tokens.*1.5' "${gen[@]}" --max-new-tokens 1.5
opt_case gen_max_new_tokens_empty 2 'max-new-tokens' "${gen[@]}" --max-new-tokens=
opt_case gen_temperature_negative 2 'temperature.*-1' "${gen[@]}" --temperature -1
opt_case gen_temperature_nan 2 'temperature.*nan' "${gen[@]}" --temperature nan
opt_case gen_temperature_inf 2 'temperature.*inf' "${gen[@]}" --temperature inf
opt_case gen_temperature_tiny 0 '"tokens"|"text"' "${gen[@]}" --temperature 1e-300 --max-new-tokens 2
opt_case gen_top_p_zero 2 'top-p.*0' "${gen[@]}" --top-p 0
opt_case gen_top_p_above_one 2 'top-p.*1.5' "${gen[@]}" --top-p 1.5
opt_case gen_top_p_nan 2 'top-p.*nan' "${gen[@]}" --top-p nan
opt_case gen_top_k_negative 2 'top-k.*-3' "${gen[@]}" --top-k -3
# A k beyond the vocabulary keeps every token, as transformers clamps it.
opt_case gen_top_k_beyond_int 0 '"tokens"' "${gen[@]}" --top-k 99999999999 --max-new-tokens 2
opt_case gen_seed_negative 2 'seed.*-1' "${gen[@]}" --seed -1
opt_case gen_seed_beyond_uint64 2 'seed.*18446744073709551616' "${gen[@]}" --seed 18446744073709551616
opt_case gen_batch_size_zero 2 'batch-size.*0' "${gen[@]}" --batch-size 0
# The batch is at most the prompts: nothing is sized by the option alone.
opt_case gen_batch_size_huge 0 '"tokens"' "${gen[@]}" --batch-size 2147483647 --max-new-tokens 2
# generate: token prompts.
opt_case gen_tokens_empty_item 2 'tokens.*1,,2' generate model --tokens 1,,2
opt_case gen_tokens_word 2 'tokens.*abc' generate model --tokens abc
opt_case gen_tokens_empty 2 'tokens' generate model --tokens=
opt_case gen_tokens_beyond_vocab 1 '99999 is outside the model.s vocabulary' generate model --tokens 1,99999
opt_case gen_tokens_negative 2 'tokens.*-1' generate model --tokens 1,-1
opt_case gen_tokens_beyond_int 2 'tokens.*4294967297' generate model --tokens 4294967297
opt_case gen_prompt_beyond_positions 1 'prompt of 4997 tokens.*4096 positions' \
  generate model --tokens "$(seq -s, 4 1 5000)"
opt_case gen_new_tokens_beyond_positions 1 'max-new-tokens 5000.*4096 positions' \
  generate model --tokens 4,5 --max-new-tokens 5000
# generate: text prompts and stops.
opt_case gen_prompt_empty 1 'the prompt has no tokens' generate model --prompt ''
opt_case gen_no_prompt 2 'no prompt: give --prompt' generate model
opt_case gen_stop_empty 2 'stop.*empty' "${gen[@]}" --stop ''
if begin gen_prompt_file_missing; then
  text_model_setup && ln -s "$text_model" "$W/model"
  expect gen_prompt_file_missing 1 'prompts.txt.*(no such|not found|does not exist)' -- \
    generate model --prompt-file prompts.txt
fi
if begin gen_prompt_file_directory; then
  text_model_setup && ln -s "$text_model" "$W/model" && mkdir "$W/prompts"
  expect gen_prompt_file_directory 1 'prompts.*directory' -- generate model --prompt-file prompts
fi
if begin gen_prompt_file_blank; then
  text_model_setup && ln -s "$text_model" "$W/model" && printf '\n\r\n   \n' > "$W/p.txt"
  expect gen_prompt_file_blank 1 'p.txt.*(no prompt|blank|empty)' -- generate model --prompt-file p.txt
fi
if begin gen_prompt_file_invalid_utf8; then
  text_model_setup && ln -s "$text_model" "$W/model" && printf 'hello\nworld \xff\xfe\n' > "$W/p.txt"
  expect gen_prompt_file_invalid_utf8 1 'p.txt.*line 2.*UTF-8' -- generate model --prompt-file p.txt
fi
if begin gen_prompt_file_nul; then
  text_model_setup && ln -s "$text_model" "$W/model" && printf 'hello \x00world\n' > "$W/p.txt"
  # NUL is a character of UTF-8 text; byte-level tokenizers spell it.
  expect gen_prompt_file_nul 0 '"tokens"' -- generate model --prompt-file p.txt --max-new-tokens 2
fi
if begin gen_prompt_file_fifo; then
  text_model_setup && ln -s "$text_model" "$W/model" && mkfifo "$W/p.txt"
  expect gen_prompt_file_fifo 1 'p.txt.*(regular file|FIFO|fifo)' -- generate model --prompt-file p.txt
fi
# generate: the model and its helpers.
opt_case gen_step_on_a_model_dir 1 'step.*(checkpoint|model directory)' "${gen[@]}" --step 5
opt_case gen_best_on_a_model_dir 1 'best.*(checkpoint|model directory)' "${gen[@]}" --best
opt_case gen_device_tpu 2 'device.*tpu' "${gen[@]}" --device tpu
opt_case gen_tokenizer_missing 1 'nowhere.*(no such|not found|does not exist|tokenizer.json)' \
  "${gen[@]}" --tokenizer nowhere
opt_case gen_tokenizer_is_a_file 1 'config.json.*(directory|tokenizer.json)' \
  "${gen[@]}" --tokenizer model/config.json
opt_case gen_model_missing 1 'no_model.*(no such|not found|does not exist)' \
  generate no_model --tokens 1
if begin gen_model_empty_dir; then
  mkdir "$W/empty"
  expect gen_model_empty_dir 1 'empty.*config.json' -- generate empty --tokens 1
fi
if begin gen_model_text_file; then
  echo 'this is not a job' > "$W/job.textproto"
  expect gen_model_text_file 1 'job.textproto:1:1: .*"this"' -- generate job.textproto --tokens 1
fi
if begin gen_job_empty; then
  : > "$W/job.textproto"
  expect gen_job_empty 1 'job.textproto|model' -- generate job.textproto --tokens 1
fi
if begin gen_model_without_weights; then
  mkdir "$W/m" && cp "$fixtures/llama_tiny/model/config.json" "$W/m/"
  expect gen_model_without_weights 1 'm.*(model.safetensors|weights)' -- generate m --tokens 1
fi
# eval.
opt_case eval_text_missing 1 'nope.txt.*(no such|not found|does not exist)' eval model --text nope.txt
opt_case eval_text_is_directory 1 'model.*directory' eval model --text model
if begin eval_text_empty; then
  text_model_setup && ln -s "$text_model" "$W/model" && : > "$W/t.txt"
  expect eval_text_empty 1 't.txt.*(empty|tokens)' -- eval model --text t.txt
fi
if begin eval_text_invalid_utf8; then
  text_model_setup && ln -s "$text_model" "$W/model" && printf 'hello \xff world\n' > "$W/t.txt"
  expect eval_text_invalid_utf8 1 't.txt.*UTF-8' -- eval model --text t.txt
fi
text_file() { printf 'hello world, the text to score\n' > "$W/t.txt"; }
if begin eval_seq_length_zero; then
  text_model_setup && ln -s "$text_model" "$W/model" && text_file
  expect eval_seq_length_zero 2 'seq-length.*0' -- eval model --text t.txt --seq-length 0
fi
if begin eval_seq_length_beyond_positions; then
  text_model_setup && ln -s "$text_model" "$W/model" && text_file
  expect eval_seq_length_beyond_positions 1 '100000.*4096' -- \
    eval model --text t.txt --seq-length 100000
fi
if begin eval_stride_zero; then
  text_model_setup && ln -s "$text_model" "$W/model" && text_file
  expect eval_stride_zero 2 'stride.*0' -- eval model --text t.txt --seq-length 4 --stride 0
fi
if begin eval_stride_beyond_window; then
  text_model_setup && ln -s "$text_model" "$W/model" && text_file
  expect eval_stride_beyond_window 1 'stride.*8.*seq-length.*4|stride' -- \
    eval model --text t.txt --seq-length 4 --stride 8
fi
if begin eval_text_and_data; then
  text_model_setup && ln -s "$text_model" "$W/model" && text_file
  expect eval_text_and_data 2 '(--text|--data).*(--data|--text)' -- \
    eval model --text t.txt --data "$fixtures/megatron/corpus_i32"
fi
if begin eval_data_odd_size; then
  text_model_setup && ln -s "$text_model" "$W/model" && printf 'abcdefg' > "$W/c.int32"
  expect eval_data_odd_size 1 'c.int32.*(7 bytes|multiple of 4|size)' -- eval model --data c.int32
fi
if begin eval_data_ids_beyond_vocab; then
  text_model_setup && ln -s "$text_model" "$W/model"
  printf '\x04\x00\x00\x00\x05\x00\x00\x00\x10\x27\x00\x00\x06\x00\x00\x00' > "$W/c.int32"
  expect eval_data_ids_beyond_vocab 1 'c.int32.*10000.*(vocab|160)' -- eval model --data c.int32
fi
if begin eval_data_negative_id; then
  text_model_setup && ln -s "$text_model" "$W/model"
  printf '\x04\x00\x00\x00\xff\xff\xff\xff\x05\x00\x00\x00' > "$W/c.int32"
  expect eval_data_negative_id 1 'c.int32.*-1' -- eval model --data c.int32
fi
if begin eval_data_idx_garbage; then
  text_model_setup && ln -s "$text_model" "$W/model"
  cp "$fixtures/megatron/corpus_i32.bin" "$W/c.bin" && head -c 64 /dev/urandom > "$W/c.idx"
  expect eval_data_idx_garbage 1 'c.idx' -- eval model --data c
fi
if begin eval_data_idx_without_bin; then
  text_model_setup && ln -s "$text_model" "$W/model" && cp "$fixtures/megatron/corpus_i32.idx" "$W/c.idx"
  expect eval_data_idx_without_bin 1 'c.bin' -- eval model --data c
fi
opt_case eval_needle_lengths_word 2 'lengths.*abc' eval model --needle --lengths abc
opt_case eval_needle_lengths_zero 2 'lengths.*0' eval model --needle --lengths 0
opt_case eval_needle_lengths_empty 2 'lengths' eval model --needle --lengths=
opt_case eval_needle_depths_above_one 2 'depths.*1.5' eval model --needle --lengths 64 --depths 1.5
opt_case eval_needle_depths_nan 2 'depths.*nan' eval model --needle --lengths 64 --depths nan
opt_case eval_needle_samples_zero 2 'samples.*0' eval model --needle --lengths 64 --samples 0
opt_case eval_needle_without_needle 2 '(lengths|depths).*needle' eval model --lengths 64
if begin eval_json_under_a_file; then
  text_model_setup && ln -s "$text_model" "$W/model" && text_file && echo x > "$W/f"
  expect eval_json_under_a_file 1 'json.*"f": is a file, not a directory' -- \
    eval model --text t.txt --json f/r.json
fi
opt_case eval_step_and_best 2 '(step|best).*(best|step)' eval model --text x --step 1 --best
# convert (the model-directory arguments; checkpoints are in checkpoint.sh).
opt_case conv_dtype_f16 2 'dtype.*f16' convert model --out o --dtype f16
opt_case conv_model_dir_not_a_job 1 'job file model: is a directory' convert model --out o
