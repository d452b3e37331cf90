# Model directories for the forward-only commands: config.json (sizes, RoPE, dtypes, tying) and
# model.safetensors (headers, offsets, dtypes, values), read by `generate DIR --tokens`.

# gen_tokens: the command each case runs on $W/model.
gen_tokens=(generate model --tokens 1,2,3 --max-new-tokens 2)

# cfg_case NAME JQ_FILTER REGEX: llama_tiny with config.json changed; expects exit $WANT (default 1).
cfg_case() {
  local name=$1 filter=$2 regex=$3
  begin "$name" || return 0
  model_copy "$fixtures/llama_tiny/model"
  jq_edit "$W/model/config.json" "$filter"
  expect "$name" "${WANT:-1}" "$regex" -- "${gen_tokens[@]}"
}
cfg_case cfg_hidden_size_string '.hidden_size = "64"' 'config.json.*hidden_size.*"64"'
cfg_case cfg_hidden_size_zero '.hidden_size = 0' 'config.json.*hidden_size.*0'
cfg_case cfg_hidden_size_missing 'del(.hidden_size)' 'config.json.*hidden_size'
cfg_case cfg_heads_do_not_divide '.num_attention_heads = 5 | del(.head_dim)' \
  'config.json.*num_attention_heads.*5'
cfg_case cfg_kv_heads_do_not_divide '.num_key_value_heads = 3' 'num_key_value_heads.*3'
cfg_case cfg_kv_heads_zero '.num_key_value_heads = 0' 'num_key_value_heads.*0'
cfg_case cfg_head_dim_against_weights '.head_dim = 32' 'head_dim|q_proj'
cfg_case cfg_layers_negative '.num_hidden_layers = -2' 'num_hidden_layers.*-2'
cfg_case cfg_layers_fraction '.num_hidden_layers = 2.5' 'num_hidden_layers.*2.5'
# Tensors the config does not use are named and ignored, as transformers does.
WANT=0 cfg_case cfg_layers_fewer '.num_hidden_layers = 2' 'ignoring tensor "model.layers.2'
cfg_case cfg_layers_huge '.num_hidden_layers = 1000000000' 'num_hidden_layers.*1000000000'
cfg_case cfg_intermediate_beyond_int '.intermediate_size = 1e19' 'intermediate_size'
cfg_case cfg_rms_eps_negative '.rms_norm_eps = -1e-5' 'rms_norm_eps'
cfg_case cfg_rms_eps_string '.rms_norm_eps = "1e-5"' 'rms_norm_eps'
cfg_case cfg_max_positions_zero '.max_position_embeddings = 0' 'max_position_embeddings.*0'
cfg_case cfg_max_positions_below_prompt '.max_position_embeddings = 2' \
  'max_position_embeddings|positions'
cfg_case cfg_rope_theta_zero '.rope_parameters.rope_theta = 0' 'rope_theta.*0'
cfg_case cfg_rope_theta_negative '.rope_parameters.rope_theta = -10000' 'rope_theta.*-10000'
cfg_case cfg_rope_type_unknown '.rope_parameters.rope_type = "superrope"' 'rope_type.*superrope'
cfg_case cfg_rope_factor_negative '.rope_parameters.factor = -8' 'factor.*-8'
cfg_case cfg_rope_factor_zero '.rope_parameters.factor = 0' 'factor.*0'
cfg_case cfg_rope_llama3_low_equals_high '.rope_parameters.low_freq_factor = 4' \
  'low_freq_factor|high_freq_factor'
cfg_case cfg_rope_original_max_zero '.rope_parameters.original_max_position_embeddings = 0' \
  'original_max_position_embeddings'
cfg_case cfg_rope_llama3_missing_factor '.rope_parameters |= del(.high_freq_factor)' \
  'high_freq_factor'
cfg_case cfg_rope_both_forms_disagree '.rope_scaling = (.rope_parameters | .factor = 2)' \
  'rope_scaling|rope_parameters'
cfg_case cfg_rope_theta_twice_disagree '.rope_theta = 500000' 'rope_theta'
cfg_case cfg_hidden_act_gelu '.hidden_act = "gelu"' 'hidden_act.*gelu'
cfg_case cfg_attention_bias '.attention_bias = true' 'attention_bias'
cfg_case cfg_mlp_bias '.mlp_bias = true' 'mlp_bias'
cfg_case cfg_model_type_gpt2 '.model_type = "gpt2"' 'model_type.*gpt2'
cfg_case cfg_tie_string '.tie_word_embeddings = "yes"' 'tie_word_embeddings.*yes'
WANT=0 cfg_case cfg_tie_true_with_lm_head '.tie_word_embeddings = true' \
  'ignoring tensor "lm_head.weight".*tie_word_embeddings=true'
# config.json's dtype is what transformers loads with dtype="auto"; Kelvin reads the weights' own.
WANT=0 cfg_case cfg_dtype_unknown '.dtype = "float8_e4m3"' '"tokens"'
cfg_case cfg_bos_id_beyond_vocab '.bos_token_id = 100000' 'bos_token_id.*100000'
cfg_case cfg_eos_id_string '.eos_token_id = "2"' 'eos_token_id'
cfg_case cfg_eos_list_with_negative '.eos_token_id = [2, -1]' 'eos_token_id.*-1'
cfg_case cfg_vocab_fraction '.vocab_size = 160.5' 'vocab_size.*160.5'
cfg_case cfg_top_level_array '[.]' 'config.json'
if begin cfg_duplicate_key; then
  model_copy "$fixtures/llama_tiny/model"
  sed -i 's/"hidden_size": 64,/"hidden_size": 64, "hidden_size": 128,/' "$W/model/config.json"
  expect cfg_duplicate_key 1 'config.json.*hidden_size.*(twice|more than once)' -- "${gen_tokens[@]}"
fi
if begin cfg_deep_nesting; then
  model_copy "$fixtures/llama_tiny/model"
  { printf '{"x": '; head -c 300000 /dev/zero | tr '\0' '['; head -c 300000 /dev/zero | tr '\0' ']'
    printf ', '; tail -c +2 "$fixtures/llama_tiny/model/config.json"; } > "$W/model/config.json"
  expect cfg_deep_nesting 1 'config.json.*(deep|nest)' -- "${gen_tokens[@]}"
fi
if begin cfg_is_directory; then
  model_copy "$fixtures/llama_tiny/model"
  rm "$W/model/config.json" && mkdir "$W/model/config.json"
  expect cfg_is_directory 1 'config.json.*(directory|regular file)' -- "${gen_tokens[@]}"
fi
if begin cfg_dangling_link; then
  model_copy "$fixtures/llama_tiny/model"
  rm "$W/model/config.json" && ln -s nowhere.json "$W/model/config.json"
  expect cfg_dangling_link 1 'config.json' -- "${gen_tokens[@]}"
fi

# st_case NAME JQ_FILTER REGEX: llama_tiny with its safetensors header changed.
st_case() {
  local name=$1 filter=$2 regex=$3
  begin "$name" || return 0
  model_copy "$fixtures/llama_tiny/model"
  st_edit "$W/model/model.safetensors" "$filter"
  expect "$name" 1 "$regex" -- "${gen_tokens[@]}"
}
st_case st_offsets_overlap '.["model.norm.weight"].data_offsets = .["model.layers.2.input_layernorm.weight"].data_offsets' \
  'model.safetensors.*(overlap|offsets)'
st_case st_extra_tensor_name '.["model.layers.9.self_attn.q_proj.weight"] = .["model.norm.weight"]' \
  'model.layers.9.self_attn.q_proj.weight'
st_case st_offsets_gap '.["lm_head.weight"].data_offsets = [0, 40956]' \
  'model.safetensors.*lm_head.weight'
st_case st_offsets_reversed '.["model.norm.weight"].data_offsets |= [.[1], .[0]]' \
  'model.safetensors.*model.norm.weight'
st_case st_offsets_beyond_file '.["model.norm.weight"].data_offsets |= [.[0], .[1] + 1000000]' \
  'model.safetensors.*model.norm.weight'
st_case st_offsets_negative '.["model.norm.weight"].data_offsets = [-256, 0]' \
  'model.safetensors.*model.norm.weight'
st_case st_dtype_f16_same_bytes '.["model.norm.weight"].dtype = "F16" | .["model.norm.weight"].shape = [128]' \
  'model.norm.weight.*(F16|shape|128)'
st_case st_dtype_unknown '.["model.norm.weight"].dtype = "Q4_K"' 'model.norm.weight.*Q4_K'
st_case st_dtype_number '.["model.norm.weight"].dtype = 7' 'model.norm.weight.*dtype'
st_case st_shape_negative '.["model.norm.weight"].shape = [-64]' 'model.norm.weight.*shape'
st_case st_shape_overflow '.["model.norm.weight"].shape = [4294967296, 4294967296, 4294967296]' \
  'model.norm.weight.*shape'
st_case st_shape_transposed '.["model.layers.0.mlp.down_proj.weight"].shape = [128, 64]' \
  'down_proj.*(128, 64|\[128, 64\]|128 x 64)'
# A tensor taken out of the header leaves its bytes to no tensor: the file is damaged.
st_case st_tensor_missing 'del(.["model.layers.1.self_attn.q_proj.weight"])' \
  'model.safetensors: bytes \[[0-9]+, [0-9]+\) of the data section belong to no tensor'
st_case st_tensor_renamed 'with_entries(if .key == "model.norm.weight" then .key = "model.final_norm.weight" else . end)' \
  'model.norm.weight|model.final_norm.weight'
st_case st_metadata_not_strings '.__metadata__ = {"format": 5}' 'model.safetensors.*__metadata__'
st_case st_header_array '[.]' 'model.safetensors.*header'
st_case st_tensor_entry_string '.["model.norm.weight"] = "F32"' 'model.safetensors.*model.norm.weight'
if begin st_nan_weights; then
  model_copy "$fixtures/llama_tiny/model"
  # model.norm.weight is the last 256 bytes: 64 quiet NaNs.
  head -c -256 "$fixtures/llama_tiny/model/model.safetensors" > "$W/model/model.safetensors"
  for _ in $(seq 64); do printf '\x00\x00\xc0\x7f'; done >> "$W/model/model.safetensors"
  expect st_nan_weights 1 'model.norm.weight.*(NaN|not finite|nan)' -- "${gen_tokens[@]}"
fi
if begin st_truncated_data; then
  model_copy "$fixtures/llama_tiny/model"
  head -c -1000 "$fixtures/llama_tiny/model/model.safetensors" > "$W/model/model.safetensors"
  expect st_truncated_data 1 'model.safetensors.*(truncated|shorter|beyond|bytes)' -- "${gen_tokens[@]}"
fi
if begin st_header_size_beyond_file; then
  model_copy "$fixtures/llama_tiny/model"
  { printf '\x00\x00\x10\x00\x00\x00\x00\x00'
    tail -c +9 "$fixtures/llama_tiny/model/model.safetensors"; } > "$W/model/model.safetensors"
  expect st_header_size_beyond_file 1 'model.safetensors.*header' -- "${gen_tokens[@]}"
fi
if begin st_seven_bytes; then
  model_copy "$fixtures/llama_tiny/model"
  printf 'abcdefg' > "$W/model/model.safetensors"
  expect st_seven_bytes 1 'model.safetensors.*(7 bytes|too short|truncated|header)' -- "${gen_tokens[@]}"
fi
if begin st_is_directory; then
  model_copy "$fixtures/llama_tiny/model"
  rm "$W/model/model.safetensors" && mkdir "$W/model/model.safetensors"
  expect st_is_directory 1 'model.safetensors.*(directory|regular file)' -- "${gen_tokens[@]}"
fi
# st_subset SOURCE OUT NAME...: a safetensors file of SOURCE's tensors NAME...
st_subset() {
  local source=$1 out=$2 n header offset=0 entries='{}' name b e
  shift 2
  n=$(od -An -tu8 -N8 "$source" | tr -d ' ')
  header=$(tail -c +9 "$source" | head -c "$n")
  : > "$out.data"
  for name in "$@"; do
    read -r b e < <(jq -r --arg k "$name" '.[$k].data_offsets | "\(.[0]) \(.[1])"' <<< "$header")
    tail -c +$(( 9 + n + b )) "$source" | head -c $(( e - b )) >> "$out.data"
    entries=$(jq -c --arg k "$name" --argjson h "$header" --argjson o "$offset" \
      '.[$k] = ($h[$k] | .data_offsets = [$o, $o + .data_offsets[1] - .data_offsets[0]])' \
      <<< "$entries")
    offset=$(( offset + e - b ))
  done
  local len=${#entries} i
  {
    for i in 0 1 2 3 4 5 6 7; do printf "\\x$(printf %02x $(( (len >> (8 * i)) & 255 )))"; done
    printf '%s' "$entries"
    cat "$out.data"
  } > "$out" && rm "$out.data"
}
# sharded_model: llama_tiny in $W/model as two shards (the embeddings and head; the rest) with
# model.safetensors.index.json.
sharded_model() {
  local source="$fixtures/llama_tiny/model/model.safetensors" names first=() rest=() name
  model_copy "$fixtures/llama_tiny/model"
  rm "$W/model/model.safetensors"
  mapfile -t names < <(tail -c +9 "$source" | head -c "$(od -An -tu8 -N8 "$source" | tr -d ' ')" |
                       jq -r 'keys[] | select(. != "__metadata__")')
  for name in "${names[@]}"; do
    if [[ $name == lm_head.weight || $name == model.embed_tokens.weight ]]; then
      first+=("$name")
    else
      rest+=("$name")
    fi
  done
  st_subset "$source" "$W/model/model-00001-of-00002.safetensors" "${first[@]}"
  st_subset "$source" "$W/model/model-00002-of-00002.safetensors" "${rest[@]}"
  printf '%s\n' "${first[@]}" | jq -R '{(.): "model-00001-of-00002.safetensors"}' > "$W/map1"
  printf '%s\n' "${rest[@]}" | jq -R '{(.): "model-00002-of-00002.safetensors"}' > "$W/map2"
  jq -s '{metadata: {}, weight_map: add}' "$W/map1" "$W/map2" \
    > "$W/model/model.safetensors.index.json"
  rm "$W/map1" "$W/map2"
}
if begin st_sharded_control; then
  sharded_model
  expect st_sharded_control 0 '"tokens"' -- "${gen_tokens[@]}"
fi
if begin st_index_missing_shard; then
  sharded_model
  rm "$W/model/model-00002-of-00002.safetensors"
  expect st_index_missing_shard 1 'model-00002-of-00002.safetensors' -- "${gen_tokens[@]}"
fi
if begin st_index_shards_swapped; then
  sharded_model
  mv "$W/model/model-00001-of-00002.safetensors" "$W/model/tmp"
  mv "$W/model/model-00002-of-00002.safetensors" "$W/model/model-00001-of-00002.safetensors"
  mv "$W/model/tmp" "$W/model/model-00002-of-00002.safetensors"
  expect st_index_shards_swapped 1 'model-0000[12]-of-00002.safetensors' -- "${gen_tokens[@]}"
fi
if begin st_index_tensor_twice; then
  sharded_model
  st_subset "$fixtures/llama_tiny/model/model.safetensors" "$W/model/model-00001-of-00002.safetensors" \
    lm_head.weight model.embed_tokens.weight model.norm.weight
  expect st_index_tensor_twice 1 'model.norm.weight' -- "${gen_tokens[@]}"
fi
if begin st_index_weight_map_string; then
  sharded_model
  jq_edit "$W/model/model.safetensors.index.json" '.weight_map = "all"'
  expect st_index_weight_map_string 1 'model.safetensors.index.json.*weight_map' -- "${gen_tokens[@]}"
fi
if begin st_index_escapes_directory; then
  sharded_model
  jq_edit "$W/model/model.safetensors.index.json" \
    '.weight_map["model.norm.weight"] = "../../model-00002-of-00002.safetensors"'
  expect st_index_escapes_directory 1 'model.safetensors.index.json.*\.\./' -- "${gen_tokens[@]}"
fi
