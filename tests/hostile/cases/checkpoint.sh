# Checkpoints of the demo job (two steps, saved after each): checkpoint.json's fields edited, part
# files truncated, damaged, swapped between steps or missing, read by convert and by a resume.

ckpt_base="$scratch/ckpt_base"
# ckpt_setup: trains the base checkpoints once (the first case that needs them).
ckpt_setup() {
  [[ -d "$ckpt_base/step_00000002" ]] && return 0
  (cd "$scratch" && "$kelvin" train "$demo_job" --set training.steps=2 \
     --set lr_schedule.warmup_steps=1 --set training.eval_interval=0 \
     --set checkpoint.interval_steps=1 --set checkpoint.keep_last=2 \
     --set checkpoint.dir=\""$ckpt_base"\" --set launch.run_dir=\""$scratch/ckpt_run"\" \
     --set training.export_hf_dir=\"\") > "$scratch/ckpt_setup.log" 2>&1 ||
    { echo "checkpoint setup failed:"; tail -n 5 "$scratch/ckpt_setup.log"; }
}
# ck_case NAME EXIT REGEX COMMAND [ARGS...]: the base checkpoints copied to $W/ckpt and changed by
# the caller's function ck_change (defined before each call), then COMMAND on the demo job with
# checkpoint.dir=$W/ckpt: convert (to $W/hf) or train (a resume to step 3).
ck_case() {
  local name=$1 want=$2 regex=$3 command=$4
  shift 4
  begin "$name" || return 0
  ckpt_setup
  cp -r "$ckpt_base" "$W/ckpt"
  (cd "$W/ckpt" && ck_change)
  local args=(--set checkpoint.dir=\""$W/ckpt"\")
  if [[ $command == convert ]]; then
    args+=(--out hf)
  else
    args+=(--set training.steps=3 --set training.eval_interval=0 --set training.export_hf_dir=\"\"
           --set launch.run_dir=\""$W/run"\" --set lr_schedule.warmup_steps=1)
  fi
  expect "$name" "$want" "$regex" -- "$command" "$demo_job" "${args[@]}" "$@"
}
newest=step_00000002
part=part_0_of_1.safetensors
ck_change() { :; }
ck_case ck_control_convert 0 'hf' convert
ck_change() { head -c 40 $newest/checkpoint.json > x && mv x $newest/checkpoint.json; }
ck_case ck_json_truncated 1 "$newest/checkpoint.json" convert
ck_change() { echo '[]' > $newest/checkpoint.json; }
ck_case ck_json_array 1 "$newest/checkpoint.json" convert
ck_change() { jq_edit $newest/checkpoint.json '.step = 7'; }
ck_case ck_json_step_other 1 "$newest.*step.*7" convert
ck_change() { jq_edit $newest/checkpoint.json '.parts = 0'; }
ck_case ck_json_parts_zero 1 "$newest/checkpoint.json: \"parts\" is missing or not a count >= 1" convert
ck_change() { jq_edit $newest/checkpoint.json '.parts = 1000000000'; }
ck_case ck_json_parts_huge 1 "$newest.*(parts|part_0_of_1000000000).*1000000000" convert
ck_change() { jq_edit $newest/checkpoint.json '.parts = -1'; }
ck_case ck_json_parts_negative 1 "$newest/checkpoint.json: \"parts\" is missing or not a count >= 1" convert
# The layout is a description: convert and resume place each piece by its region metadata.
ck_change() { jq_edit $newest/checkpoint.json '.layout = "tp2 dp1"'; }
ck_case ck_json_layout_edited 0 'hf' convert
# Format 3 is format 4 without the run identity: still read, without the identity check.
ck_change() { jq_edit $newest/checkpoint.json '.format = "kelvin-checkpoint-3"'; }
ck_case ck_json_format_older 0 'hf' convert
ck_change() { jq_edit $newest/checkpoint.json '.format = "kelvin-checkpoint-9"'; }
ck_case ck_json_format_newer 1 "$newest/checkpoint.json is a \"kelvin-checkpoint-9\" checkpoint" convert
ck_change() { jq_edit $newest/checkpoint.json '.run = "00000000000000000000000000000000"'; }
ck_case ck_json_run_other 1 "$newest.*run" convert
ck_change() { jq_edit $newest/checkpoint.json '.step = "2"'; }
ck_case ck_json_step_string 1 "$newest/checkpoint.json.*step" convert
ck_change() { jq_edit $newest/checkpoint.json '.optimizer_steps = -5'; }
ck_case ck_json_optimizer_steps_negative 1 "$newest/checkpoint.json: \"optimizer_steps\" is missing or not a count" train
ck_change() { jq_edit $newest/checkpoint.json '.loss_spike.recent_losses = "low"'; }
ck_case ck_json_spike_losses_string 1 "$newest/checkpoint.json.*recent_losses" train
ck_change() { jq_edit $newest/checkpoint.json '.loss_spike.recent_losses = [-5]'; }
ck_case ck_json_spike_losses_negative 1 '"loss_spike" holds the loss -5, not a finite number >= 0' train
ck_change() { jq_edit $newest/checkpoint.json '.loss_spike.recent_losses = [range(100000)]'; }
ck_case ck_json_spike_losses_beyond_window 1 "$newest/checkpoint.json.*recent_losses" train
ck_change() { jq_edit $newest/checkpoint.json '.loss_spike.skips_in_a_row = -2'; }
ck_case ck_json_spike_skips_negative 1 "$newest/checkpoint.json: .*skips_in_a_row" train
# Another data order than the job's is named, and the run goes on (data.md says what changes).
ck_change() { jq_edit $newest/checkpoint.json '.data_order["training.seed"] = "99"'; }
ck_case ck_json_data_order_edited 0 "had training.seed=99, this job has 1234" train
ck_change() { jq_edit $newest/checkpoint.json '.data_order = {}'; }
ck_case ck_json_data_order_emptied 0 "records no data order|no data order" train
ck_change() { sed -i 's/"parts": 1,/"parts": 1, "parts": 2,/' $newest/checkpoint.json; }
ck_case ck_json_duplicate_key 1 "$newest/checkpoint.json.*parts.*(twice|more than once)" convert
ck_change() { truncate -s -100 $newest/$part; }
ck_case ck_part_truncated 1 "$newest/$part" convert
# flip_byte TENSOR: one byte of that piece's data in the newest part file changed.
flip_byte() {
  local n begin
  n=$(od -An -tu8 -N8 $newest/$part | tr -d ' ')
  begin=$(tail -c +9 $newest/$part | head -c "$n" | jq --arg k "$1" '.[$k].data_offsets[0]')
  printf '\x55' | dd of=$newest/$part bs=1 seek=$(( 8 + n + begin + 10 )) conv=notrunc status=none
}
ck_change() { flip_byte model.norm.weight; }
ck_case ck_part_weight_byte_flipped 1 "$newest/$part.*model.norm.weight.*(CRC|crc)" convert
ck_change() { flip_byte adamw.v:model.norm.weight; }
ck_case ck_part_moment_byte_flipped 1 "$newest/$part.*adamw.v:model.norm.weight.*(CRC|crc)" train
ck_change() { cp step_00000001/$part $newest/$part; }
ck_case ck_part_from_the_other_step 1 "$newest/$part.*step" convert
ck_change() { rm $newest/$part; }
ck_case ck_part_missing 1 "$newest/$part" convert
ck_change() { rm $newest/$part && mkdir $newest/$part; }
ck_case ck_part_is_directory 1 "$newest/$part.*(directory|regular file)" convert
ck_change() { st_edit $newest/$part '.__metadata__ |= with_entries(if (.key | startswith("region:")) then .value = "garbage" else . end)'; }
ck_case ck_part_region_garbage 1 "$newest/$part.*region" convert
ck_change() { st_edit $newest/$part '.__metadata__ |= with_entries(if (.key | startswith("crc32c:")) then .value = "zz" else . end)'; }
ck_case ck_part_crc_not_hex 1 "$newest/$part.*crc32c" convert
ck_change() { st_edit $newest/$part 'del(.__metadata__)'; }
ck_case ck_part_without_metadata 1 "$newest/$part" convert
ck_change() { rm -r $newest && mkdir step_00000002.partial; }
ck_case ck_only_older_and_partial 0 'hf' convert
ck_change() { rm -r step_0*; }
ck_case ck_dir_empty 1 'checkpoint.dir=.* holds no complete checkpoint' convert
ck_change() { mkdir step_99999999; }
ck_case ck_step_dir_without_json 1 'step_99999999' convert
ck_change() { :; }
ck_case ck_step_not_kept 1 'step.*7.*(step_00000001|step_00000002|1, 2)' convert --step 7
ck_case ck_best_without_evaluations 1 'holds no checkpoint with an evaluation loss' convert --best
ck_case ck_step_negative 2 'step.*-1' convert --step -1
if begin ck_dir_is_a_file; then
  echo x > "$W/ckpt"
  expect ck_dir_is_a_file 1 'checkpoint.dir.*ckpt.*(file|directory)' -- \
    convert "$demo_job" --set checkpoint.dir=\""$W/ckpt"\" --out hf
fi
