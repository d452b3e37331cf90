# Job files and --set overrides: the loss-spike rules, launch settings, names, and the text format
# itself; plan and launch check them (launch writes nothing for a refused job).

# job_case NAME EXIT REGEX COMMAND [--set ...]: COMMAND on the demo job with the overrides.
job_case() {
  local name=$1 want=$2 regex=$3 command=$4
  shift 4
  begin "$name" || return 0
  expect "$name" "$want" "$regex" -- "$command" "$demo_job" "$@"
}
# The loss-spike rules.
job_case job_spike_factor_one 1 'training.loss_spike.factor.*1' plan --set training.loss_spike.factor=1
job_case job_spike_factor_negative 1 'training.loss_spike.factor.*-3' plan \
  --set training.loss_spike.factor=-3
job_case job_spike_factor_inf 1 'training.loss_spike.factor.*inf' plan \
  --set training.loss_spike.factor=inf
job_case job_spike_window_zero 1 'training.loss_spike.window.*0' plan --set training.loss_spike.window=0
job_case job_spike_window_huge 1 'training.loss_spike.window.*10001' plan \
  --set training.loss_spike.window=10001
job_case job_spike_max_skips_negative 1 'training.loss_spike.max_skips.*-1' plan \
  --set training.loss_spike.max_skips=-1
job_case job_spike_min_loss_negative 1 'training.loss_spike.min_loss.*-0.5' plan \
  --set training.loss_spike.min_loss=-0.5
job_case job_spike_min_loss_nan 1 'training.loss_spike.min_loss.*nan' plan \
  --set training.loss_spike.min_loss=nan
job_case job_spike_action_unknown 1 'training.loss_spike.action.*MAYBE' plan \
  --set training.loss_spike.action=MAYBE
job_case job_spike_action_number 1 'training.loss_spike.action.*7' plan \
  --set training.loss_spike.action=7
job_case job_spike_window_fraction 1 'training.loss_spike.window.*2.5' plan \
  --set training.loss_spike.window=2.5
# Settings of a rule that is not in force are ignored, as a disabled model.ssa section is.
job_case job_spike_max_skips_without_skip 0 'layout' plan \
  --set training.loss_spike.max_skips=5
# --set itself.
job_case set_without_equals 1 'training.steps' plan --set training.steps
job_case set_empty_value 1 'training.steps' plan --set training.steps=
job_case set_word_for_int 1 'training.steps.*abc' plan --set training.steps=abc
job_case set_beyond_int64 1 'training.steps.*99999999999999999999' plan \
  --set training.steps=99999999999999999999
job_case set_unknown_field 1 'trainig.*(did you mean|training)' plan --set trainig.steps=3
job_case set_message_field 1 'model' plan --set model=5
job_case set_trailing_dot 1 'training\.' plan --set training.=5
job_case set_unknown_enum 1 'training.device.*TPU' plan --set training.device=TPU
# An unquoted string value is taken as the string.
job_case set_string_unquoted 0 'layout' plan --set launch.run_dir=/tmp/x
job_case set_string_with_newline 1 'launch.run_dir' launch "--set=launch.run_dir=\"a\\nb\""
job_case set_repeated_field 1 'launch.setup_commands is a list' plan --set launch.setup_commands=\"echo\"
job_case set_invalid_utf8 1 'name' plan "--set=name=\"$(printf 'a\xffb')\""
# Launch settings.
job_case launch_time_limit_impossible 1 'launch.time_limit.*25:99:99' launch \
  --set launch.time_limit=\"25:99:99\"
job_case launch_time_limit_words 1 'launch.time_limit.*tomorrow' launch \
  --set launch.time_limit=\"tomorrow\"
job_case launch_nodes_zero 1 'launch.nodes.*0' launch --set launch.nodes=0
job_case launch_nodes_negative 1 'launch.nodes.*-4' launch --set launch.nodes=-4
job_case launch_processes_overflow 1 'launch.(nodes|processes_per_node)' launch \
  --set launch.nodes=65536 --set launch.processes_per_node=65536
job_case launch_gpus_negative 1 'launch.gpus_per_node.*-1' launch --set launch.gpus_per_node=-1
job_case launch_cpus_negative 1 'launch.cpus_per_process.*-2' launch --set launch.cpus_per_process=-2
job_case launch_warning_negative 1 'launch.preemption_warning_seconds.*-30' launch \
  --set launch.preemption_warning_seconds=-30
job_case launch_gpu_memory_negative 1 'launch.gpu_memory_gib.*-80' launch \
  --set launch.gpu_memory_gib=-80
job_case launch_mpi_plugin_shell 1 'launch.mpi_plugin' launch "--set=launch.mpi_plugin=\"pmix;id\""
job_case launch_memory_words 1 'launch.memory_per_node.*lots' launch \
  --set launch.memory_per_node=\"lots\"
job_case launch_memory_negative 1 'launch.memory_per_node.*-5G' launch \
  --set launch.memory_per_node=\"-5G\"
job_case launch_extra_option_newline 1 'launch.extra_sbatch_options' launch \
  "--set=launch.extra_sbatch_options=\"--exclusive\\n#SBATCH --uid=0\""
job_case launch_extra_option_not_an_option 1 'launch.extra_sbatch_options.*exclusive' launch \
  --set launch.extra_sbatch_options=\"exclusive\"
job_case launch_account_space 1 'launch.account' launch "--set=launch.account=\"a b\""
job_case launch_qos_quote 1 'launch.qos' launch "--set=launch.qos=\"x'y\""
job_case launch_setup_newline 1 'launch.setup_commands' launch \
  "--set=launch.setup_commands=\"module load x\\n\""
job_case launch_hardware_devices_zero 1 'launch.hardware.devices_per_node.*0' plan \
  --set launch.hardware.peak_tflops=100 --set launch.hardware.memory_gbps=1000 \
  --set launch.hardware.devices_per_node=0
job_case launch_hardware_efficiency_nan 1 'launch.hardware.gemm_efficiency.*nan' plan \
  --set launch.hardware.preset=H100_SXM --set launch.hardware.gemm_efficiency=nan
job_case launch_run_dir_newline 1 'launch.run_dir' launch "--set=launch.run_dir=\"runs/a\\nb\""
job_case launch_run_dir_is_a_file 1 'launch.run_dir.*(file|directory)' launch \
  --set "launch.run_dir=\"$demo_job\""
# Names and sizes.
job_case job_name_slash 1 'name.*a/b' launch --set name=\"a/b\"
# An empty name is the job file's name.
job_case job_name_empty 0 'passkey_tiny_cpu.sbatch' launch --set name=\"\"
job_case job_name_very_long 1 'name=.*(long|characters)' launch --set "name=\"$(printf 'n%.0s' {1..5000})\""
job_case job_name_newline 1 'name' launch "--set=name=\"a\\nb\""
job_case job_seq_length_negative 1 'training.seq_length.*-160' plan --set training.seq_length=-160
job_case job_lr_nan 1 'optimizer.lr.*nan' plan --set optimizer.lr=nan
job_case job_steps_zero 1 'training.steps.*0' plan --set training.steps=0
job_case job_micro_batch_beyond_global 1 'micro_batch_size|global_batch_size' plan \
  --set training.micro_batch_size=32
# The job file itself.
# jobfile_case NAME EXIT REGEX CONTENT: a job file of CONTENT (printf %b), planned.
jobfile_case() {
  local name=$1 want=$2 regex=$3
  begin "$name" || return 0
  printf '%b' "$4" > "$W/job.textproto"
  expect "$name" "$want" "$regex" -- plan job.textproto
}
jobfile_case jobfile_unclosed 1 'job.textproto.*(line|:)' 'name: "x"\nmodel {\n'
jobfile_case jobfile_misspelled 1 'job.textproto.*modle' 'name: "x"\nmodle { preset: "tiny" }\n'
jobfile_case jobfile_binary 1 'job.textproto' '\x00\x01\x02\xff\xfe'
jobfile_case jobfile_empty 1 'job.textproto|name|model' ''
jobfile_case jobfile_invalid_utf8_string 1 'job.textproto|name' 'name: "a\xffb"\n'
jobfile_case jobfile_field_twice 1 'job.textproto.*name' 'name: "a"\nname: "b"\n'
jobfile_case jobfile_huge_string 1 'job.textproto: is [0-9]+ bytes' "name: \"$(head -c 3000000 /dev/zero | tr '\0' n)\""
if begin jobfile_directory; then
  mkdir "$W/job.textproto"
  expect jobfile_directory 1 'job.textproto.*directory' -- plan job.textproto
fi
if begin jobfile_fifo; then
  mkfifo "$W/job.textproto"
  expect jobfile_fifo 1 'job.textproto.*(regular file|FIFO|fifo)' -- plan job.textproto
fi
