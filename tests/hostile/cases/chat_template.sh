# Chat templates (chat_template.jinja beside tokenizer.json), rendered by prepare-data for one
# conversation: syntax errors, unbounded work, recursion, arithmetic at the integer limits.

# tpl_case NAME TEMPLATE REGEX: the gpt2_style tokenizer with TEMPLATE as its chat_template.jinja;
# expects exit $WANT (default 1) and REGEX.
tpl_case() {
  local name=$1 template=$2 regex=$3
  begin "$name" || return 0
  cp -r "$fixtures/tokenizer/gpt2_style" "$W/tok"
  printf '%s' "$template" > "$W/tok/chat_template.jinja"
  echo '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}' \
    > "$W/s.jsonl"
  expect "$name" "${WANT:-1}" "$regex" -- prepare-data s.jsonl --tokenizer tok --out out/d
}
# A template that renders the conversation; the cases put what they try before it, so that the
# rendering with a generation prompt stays a prefix of the whole one.
ok='{% for m in messages %}{{ m.role }}: {{ m.content }}<|im_end|>{% endfor %}'

# Syntax.
tpl_case tpl_unclosed_if '{% if messages %}x' 'chat_template.jinja.*(endif|if)'
tpl_case tpl_unclosed_expression '{{ messages[0' 'chat_template.jinja.*line 1'
tpl_case tpl_unknown_filter "{{ messages|shuffle }}$ok" 'chat_template.jinja.*shuffle'
tpl_case tpl_unclosed_comment "$ok{# note" 'chat_template.jinja.*(comment|#\})'
tpl_case tpl_unterminated_string "{{ 'abc }}$ok" 'chat_template.jinja.*(string|quote)'
tpl_case tpl_bad_escape "{{ '\\u12' }}$ok" 'chat_template.jinja.*(escape|\\u)'
tpl_case tpl_raw_block "{% raw %}x{% endraw %}$ok" 'chat_template.jinja.*raw'
tpl_case tpl_include "{% include 'other.jinja' %}$ok" 'chat_template.jinja.*include'
tpl_case tpl_recursive_loop '{% for m in messages recursive %}{{ loop(m) }}{% endfor %}' \
  'chat_template.jinja.*recursive'
tpl_case tpl_call_block "{% call foo() %}x{% endcall %}$ok" 'chat_template.jinja.*call'
tpl_case tpl_endfor_without_for "{% endfor %}$ok" 'chat_template.jinja.*endfor'
tpl_case tpl_generation_unclosed '{% for m in messages %}{% generation %}{{ m.content }}{% endfor %}' \
  'chat_template.jinja.*(generation|endfor)'
WANT=0 tpl_case tpl_control_byte_in_string "$(printf '{{ "a\001b" }}%s' "$ok")" 'wrote'
if begin tpl_invalid_utf8; then
  cp -r "$fixtures/tokenizer/gpt2_style" "$W/tok"
  printf '%s\xff\xfe' "$ok" > "$W/tok/chat_template.jinja"
  echo '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}' \
    > "$W/s.jsonl"
  expect tpl_invalid_utf8 1 'chat_template.jinja.*UTF-8' -- \
    prepare-data s.jsonl --tokenizer tok --out out/d
fi
# Depth: nesting in the source.
tpl_case tpl_deep_parentheses "{{ $(printf '(%.0s' {1..50000})1$(printf ')%.0s' {1..50000}) }}" \
  'chat_template.jinja.*(deep|nest)'
tpl_case tpl_deep_lists "{{ $(printf '[%.0s' {1..50000})$(printf ']%.0s' {1..50000}) }}" \
  'chat_template.jinja.*(deep|nest)'
tpl_case tpl_deep_ifs "$(printf '{%% if true %%}%.0s' {1..20000})x$(printf '{%% endif %%}%.0s' {1..20000})" \
  'chat_template.jinja.*(deep|nest)'
tpl_case tpl_long_not_chain "{{ $(printf 'not %.0s' {1..50000})true }}" \
  'chat_template.jinja.*(deep|nest)'
tpl_case tpl_long_minus_chain "{{ $(printf -- '-%.0s' {1..50000})1 }}" \
  'chat_template.jinja.*(deep|nest)'
tpl_case tpl_long_filter_chain "{{ 'a'$(printf '|string%.0s' {1..50000}) }}" \
  'wrote|chat_template.jinja.*(deep|nest|steps)'
# Depth: recursion while rendering.
tpl_case tpl_macro_recursion '{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}' \
  'chat_template.jinja.*(recursion|deep|nest|calls)'
tpl_case tpl_macro_mutual_recursion '{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}' \
  'chat_template.jinja.*(recursion|deep|nest|calls)'
tpl_case tpl_macro_default_recursion '{% macro f(x=f()) %}{{ x }}{% endmacro %}{{ f() }}' \
  'chat_template.jinja.*(recursion|deep|nest|calls|f)'
# Work and size.
tpl_case tpl_range_huge "{% for i in range(10**15) %}x{% endfor %}$ok" 'chat_template.jinja.*range: more than a million'
tpl_case tpl_nested_loops "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}$ok" \
  'chat_template.jinja.*(steps|limit|bound)'
tpl_case tpl_string_times_huge "{{ 'x' * 10**12 }}$ok" 'chat_template.jinja.*more than the rendering may hold'
tpl_case tpl_list_times_huge "{{ ([1] * 10**12)|length }}$ok" 'chat_template.jinja.*more than the rendering may hold'
tpl_case tpl_list_doubling "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l|length }}$ok" \
  'chat_template.jinja.*more than the rendering may hold'
tpl_case tpl_string_doubling "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}$ok" \
  'chat_template.jinja.*more than the rendering may hold'
tpl_case tpl_replace_empty_blowup "{% set ns = namespace(s='abcdefgh') %}{% for i in range(30) %}{% set ns.s = ns.s|replace('', 'xy') %}{% endfor %}{{ ns.s|length }}$ok" \
  'chat_template.jinja.*replace with an empty old string'
tpl_case tpl_join_huge_range "{{ range(10**12)|join(',') }}$ok" 'chat_template.jinja.*range: more than a million'
tpl_case tpl_range_step_zero "{{ range(1, 10, 0)|list }}$ok" 'chat_template.jinja.*range.*(0|zero)'
tpl_case tpl_slice_step_zero "{{ messages[::0] }}$ok" 'chat_template.jinja.*(slice|step).*(0|zero)'
# Integers at the limits.
tpl_case tpl_power_overflow "{{ 2 ** 100000 }}$ok" 'chat_template.jinja.*(overflow|too large|range)'
tpl_case tpl_multiply_overflow "{{ 9223372036854775807 * 2 }}$ok" 'chat_template.jinja.*(overflow|too large|range)'
tpl_case tpl_add_overflow "{{ 9223372036854775807 + 1 }}$ok" 'chat_template.jinja.*(overflow|too large|range)'
tpl_case tpl_floordiv_min_by_minus_one "{{ (-9223372036854775807 - 1) // -1 }}$ok" \
  'chat_template.jinja.*(overflow|too large|range)'
tpl_case tpl_modulo_min_by_minus_one "{{ (-9223372036854775807 - 1) % -1 }}$ok" 'chat_template.jinja.*overflow'
tpl_case tpl_negate_min "{{ -(-9223372036854775807 - 1) }}$ok" 'chat_template.jinja.*(overflow|too large|range)'
tpl_case tpl_literal_too_large "{{ 99999999999999999999999 }}$ok" 'chat_template.jinja.*99999999999999999999999'
tpl_case tpl_float_inf_to_int "{{ (1e308 * 10)|int }}$ok" 'chat_template.jinja.*(inf|int)'
tpl_case tpl_float_huge_to_int "{{ 1e300|int }}$ok" 'chat_template.jinja.*(int|large|range)'
tpl_case tpl_round_huge "{{ 1e300|round(400) }}$ok" 'chat_template.jinja.*round'
tpl_case tpl_divide_by_zero "{{ 1 / 0 }}$ok" 'chat_template.jinja.*(division|zero)'
tpl_case tpl_floordiv_by_zero "{{ 7 // 0 }}$ok" 'chat_template.jinja.*(division|zero)'
tpl_case tpl_modulo_by_zero "{{ 7 % 0 }}$ok" 'chat_template.jinja.*(modulo|zero)'
WANT=0 tpl_case tpl_index_min "{{ messages[-9223372036854775807 - 1] }}$ok" \
  'wrote'
WANT=0 tpl_case tpl_slice_min "{{ 'abc'[-9223372036854775807 - 1:] }}$ok" 'wrote'
WANT=0 tpl_case tpl_string_times_negative "{{ 'x' * -9223372036854775807 }}$ok" 'wrote'
tpl_case tpl_center_huge "{{ 'x'|center(10**12) }}$ok" 'chat_template.jinja.*center'
tpl_case tpl_indent_huge "{{ 'x\ny'|indent(10**12) }}$ok" 'chat_template.jinja.*indent'
tpl_case tpl_tojson_indent_huge "{{ messages|tojson(indent=10**12) }}$ok" \
  'chat_template.jinja.*indent'
# Names and values.
tpl_case tpl_undefined_attribute "{{ nope.attr }}$ok" 'chat_template.jinja.*nope'
tpl_case tpl_undefined_call "{{ nope() }}$ok" 'chat_template.jinja.*nope'
tpl_case tpl_raise_exception "{{ raise_exception('Roles must alternate') }}$ok" 'Roles must alternate'
tpl_case tpl_raise_exception_number "{{ raise_exception(5) }}$ok" 'chat_template.jinja.*5'
tpl_case tpl_call_a_list "{{ messages() }}$ok" 'chat_template.jinja.*(call|callable)'
WANT=0 tpl_case tpl_strftime_unknown "{{ strftime_now('%Q') }}$ok" 'wrote'
tpl_case tpl_strftime_long "{{ strftime_now('%Y' * 100000) }}$ok" 'chat_template.jinja.*strftime_now'
tpl_case tpl_empty_output '' 's.jsonl:1.*assistant'
tpl_case tpl_ignores_messages 'hello' 's.jsonl:1.*assistant'
# Where the template comes from.
if begin tpl_config_list_without_default; then
  cp -r "$fixtures/tokenizer/gpt2_style" "$W/tok" && rm "$W/tok/chat_template.jinja"
  jq_edit "$W/tok/tokenizer_config.json" --arg t "$ok" '.chat_template = [{"name": "tool_use", "template": $t}]'
  echo '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}' \
    > "$W/s.jsonl"
  expect tpl_config_list_without_default 1 'chat_template.*(default|tool_use)' -- \
    prepare-data s.jsonl --tokenizer tok --out out/d
fi
if begin tpl_config_entry_without_template; then
  cp -r "$fixtures/tokenizer/gpt2_style" "$W/tok" && rm "$W/tok/chat_template.jinja"
  jq_edit "$W/tok/tokenizer_config.json" '.chat_template = [{"name": "default"}]'
  echo '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}' \
    > "$W/s.jsonl"
  expect tpl_config_entry_without_template 1 'chat_template.*(template|default)' -- \
    prepare-data s.jsonl --tokenizer tok --out out/d
fi
