#!/usr/bin/env python3
# jinja-snippet-expectations.py: reference outputs of small Jinja snippets, as Python jinja2
# renders them in Hugging Face transformers' chat-template environment.
#
# Each case below is (name, template, variables). Every template is rendered with the exact
# environment of scripts/chat-template-expectations.py (imported from it: ImmutableSandboxedEnvironment
# with trim_blocks, lstrip_blocks, loopcontrols and the {% generation %} tag; transformers' tojson
# filter, raise_exception and strftime_now at a fixed time), and the result is written to
# tests/data/jinja/snippets.json, which the C++ Jinja engine's tests compare against byte for byte.
# A case that fails (at compile or render time) records the error instead of the output:
# "error" (str of the exception), "error_type" (its class name) and "raised" (true when the
# template itself called raise_exception). Only the error class is meant to be matched.
#
# The variables are passed through JSON before rendering (so what is rendered is exactly what the
# JSON file holds), and are written in their key order (templates can see key order).
#
# Run from anywhere:  scripts/jinja-snippet-expectations.py [--out tests/data/jinja/snippets.json]
#                         [--list]   also print one line per case (name: output or error)
# Needs only python3 and jinja2 (Debian: python3-jinja2). Output is deterministic.
#
# To add a case: append a (name, template, variables) tuple to one of the groups below (names
# must be unique; variables must be JSON values). Avoid printing objects whose repr holds a memory
# address (generators from map/select/reject/unique/batch/items, reversed lists, bound methods):
# the script refuses outputs that contain one.

import argparse
import importlib.util
import json
import os
import re
import sys
import warnings

import jinja2

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GENERATOR = "scripts/jinja-snippet-expectations.py"
DEFAULT_OUT = "tests/data/jinja/snippets.json"


def _load_chat_template_module():
    path = os.path.join(REPO, "scripts", "chat-template-expectations.py")
    spec = importlib.util.spec_from_file_location("chat_template_expectations", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


CTE = _load_chat_template_module()

# ---------------------------------------------------------------------------------------------
# Shared variables (OpenAI-shaped conversations and tools).

MESSAGES = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "What's the weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 20}"},
    {"role": "assistant", "content": "<think>\nLooks mild.\n</think>\n\nIt is 20°C in Paris."},
]

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the weather for a city",
        "parameters": {"type": "object",
                       "properties": {"city": {"type": "string", "description": "City name"},
                                      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web for «anything»",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}},
]

USERS = [{"name": "ann", "age": 30}, {"name": "Bob"}, {"name": "cy", "age": 25}]
USERS_AGED = [{"name": "ann", "age": 30}, {"name": "bob", "age": 25}, {"name": "cy", "age": 30}]
MSG_PARTS = {"role": "user", "content": [{"type": "text", "text": "Describe "},
                                          {"type": "image", "url": "x.png"},
                                          {"type": "text", "text": "this."}]}
TREE = [{"name": "a", "children": [{"name": "b", "children": []},
                                   {"name": "c", "children": [{"name": "d", "children": []}]}]},
        {"name": "e", "children": []}]

# ---------------------------------------------------------------------------------------------
# Cases: (name, template, variables)

WHITESPACE = [
    ("ws_trim_blocks_if", "{% if true %}\nA\n{% endif %}\nB", {}),
    ("ws_lstrip_blocks_indented", "x\n    {% if true %}\n    y\n    {% endif %}\nz", {}),
    ("ws_lstrip_blocks_tabs", "x\n\t \t{% if true %}\n\ty\n\t{% endif %}\nz", {}),
    ("ws_trim_after_midline_tag", "a{% if true %}b{% endif %}\nc", {}),
    ("ws_lstrip_not_midline", "a  {% if true %}b{% endif %}  c", {}),
    ("ws_lstrip_text_before_tag", "  x {% if true %}y{% endif %}\nz", {}),
    ("ws_variable_line_start_kept", "a\n    {{ 'v' }}\nb", {}),
    ("ws_variable_newline_kept", "{{ 'v' }}\nb", {}),
    ("ws_comment_own_line", "a\n  {# comment #}\nb", {}),
    ("ws_comment_midline", "a {# c #} b", {}),
    ("ws_comment_multiline", "a\n{# line1\nline2 #}\nb", {}),
    ("ws_dash_block_left", "a  \n  {%- if true %}b{% endif %}", {}),
    ("ws_dash_block_right", "{% if true -%}  \n\n  b{% endif %}", {}),
    ("ws_dash_var_both", "a \n {{- 'v' -}} \n b", {}),
    ("ws_dash_var_left_only", "a  \n{{- 'v' }}  b", {}),
    ("ws_dash_comment", "a \n {#- c -#} \n b", {}),
    ("ws_plus_disables_lstrip", "x\n    {%+ if true %}y{% endif %}", {}),
    ("ws_plus_disables_trim", "{% if true +%}\ny{% endif %}", {}),
    ("ws_plus_and_dash", "a\n  {%+ if true -%}\n  b\n  {%- endif +%}\nc", {}),
    ("ws_trailing_newline_removed", "hello\n", {}),
    ("ws_two_trailing_newlines", "hello\n\n", {}),
    ("ws_crlf_text_and_tags", "a\r\nb\r\n{% if true %}\r\nc\r\n{% endif %}\r\nd", {}),
    ("ws_lone_cr", "a\rb{{ 'c' }}\rd", {}),
    ("ws_crlf_in_variable", "[{{ s }}]", {"s": "a\r\nb\rc"}),
    ("ws_crlf_in_string_literal", "{{ 'a\r\nb' }}|{{ 'c\\r\\nd' }}", {}),
    ("ws_tag_at_start", "{% set x = 1 %}\n{{ x }}", {}),
    ("ws_tag_at_end", "a\n{% if true %}{% endif %}", {}),
    ("ws_set_line_at_end", "a\n{% set x = 1 %}\n", {}),
    ("ws_for_lines", "{% for x in xs %}\n  - {{ x }}\n{% endfor %}\n", {"xs": [1, 2]}),
    ("ws_for_indented_tags", "<ul>\n  {% for x in xs %}\n  <li>{{ x }}</li>\n  {% endfor %}\n</ul>",
     {"xs": ["a", "b"]}),
    ("ws_else_lines", "{% if false %}\nA\n{% else %}\nB\n{% endif %}\nC", {}),
    ("ws_dash_everywhere_pattern",
     "{%- for m in messages %}\n    {%- if m.role == 'user' %}\n        {{- '<u>' + m.content + '</u>\\n' }}\n"
     "    {%- endif %}\n{%- endfor %}\n", {"messages": MESSAGES}),
    ("ws_var_dash_then_block", "{{ 'a' -}}\n\n  {% if true %}b{% endif %}", {}),
    ("ws_dash_with_lstrip", "x\n  {%- if true %}y{% endif %}", {}),
    ("ws_raw_block", "{% raw %}{{ x }}{% if %}{# c #}{% endraw %}", {}),
    ("ws_raw_trim_newlines", "{% raw %}\n{{ x }}\n{% endraw %}\nz", {}),
    ("ws_raw_dash", "a  {%- raw -%}  {{ x }}  {%- endraw -%}  b", {}),
    ("ws_raw_lstrip", "a\n    {% raw %}r{% endraw %}\nb", {}),
    ("ws_set_block_lines", "{% set x %}\n  a\n{% endset %}[{{ x }}]", {}),
    ("ws_macro_lines", "{% macro m() %}\n  in\n{% endmacro %}\n[{{ m() }}]", {}),
    ("ws_tabs_text_kept", "a\tb\n\t{{ 'c' }}\t", {}),
    ("ws_generation_tag", "{% generation %}\nhi\n{% endgeneration %}\n!", {}),
]

LITERALS = [
    ("lit_str_escapes", r"{{ 'a\nb\tc\\d\'e\"f' }}", {}),
    ("lit_str_hex_unicode", r"{{ '\x41\u00e9\U0001F600' }}", {}),
    ("lit_str_unknown_escape", r"{{ 'a\db\q\ ' }}|", {}),
    ("lit_str_octal_named", r"{{ '\101\N{BULLET}' }}", {}),
    ("lit_str_double_quoted", r'''{{ "it's \"q\"" }}''', {}),
    ("lit_str_adjacent", "{{ 'a' \"b\" 'c' }}", {}),
    ("lit_str_non_ascii", "{{ 'héllo 😀' }}", {}),
    ("lit_int_forms", "{{ 42 }} {{ -7 }} {{ 1_000 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }}", {}),
    ("lit_float_basic", "{{ 1.0 }} {{ 1e3 }} {{ 1.5e-3 }} {{ 2.50 }} {{ 1E2 }}", {}),
    ("lit_float_sum", "{{ 0.1 + 0.2 }}", {}),
    ("lit_float_big", "{{ 1e15 }} {{ 1e16 }} {{ 1e100 }} {{ 123456789.125 }}", {}),
    ("lit_float_small", "{{ 1e-5 }} {{ 0.0001 }} {{ 1e-4 }} {{ 0.5e-6 }}", {}),
    ("lit_float_neg_zero", "{{ -0.0 }} {{ 0.0 }} {{ -0 }}", {}),
    ("lit_float_from_vars", "{{ a }} {{ b }} {{ c }} {{ d }}", {"a": 1.0, "b": 1e16, "c": 0.5, "d": 100}),
    ("lit_list", "{{ [1, 'a', none, true, 1.5] }}", {}),
    ("lit_tuple", "{{ (1,) }} {{ () }} {{ (1, 'b') }}", {}),
    ("lit_dict_nested", "{{ {'b': 1, 'a': [2, (3,)], 'c': {}} }}", {}),
    ("lit_trailing_commas", "{{ [1, 2,] }} {{ {'a': 1,} }} {{ (1, 2,) }}", {}),
    ("lit_dict_nonstr_keys", "{{ {2: 'a', 2.5: 'b', none: 'c', (1, 2): 'd'} }}", {}),
    ("lit_repr_quotes", "{{ [\"it's\", 'say \"hi\"', 'both \\' and \"', 'plain'] }}", {}),
    ("lit_repr_escapes", r"{{ ['a\nb', 'tab\t', 'back\\slash', '\x01', 'é😀', '\u00a0', '\x7f'] }}", {}),
    ("lit_none_true_false", "{{ none }} {{ None }} {{ true }} {{ True }} {{ false }} {{ False }}", {}),
    ("lit_vars_repr", "{{ m }}", {"m": {"role": "user", "content": None, "ok": True, "n": [1, 2.0]}}),
]

OPERATORS = [
    ("op_arith_int", "{{ 7 + 3 }} {{ 7 - 10 }} {{ 6 * 7 }} {{ 7 / 2 }} {{ 6 / 3 }} {{ 7 // 2 }} {{ 7 % 3 }}", {}),
    ("op_floordiv_mod_negative", "{{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7 // -2 }} {{ -7.5 // 2 }}", {}),
    ("op_pow", "{{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2.0 ** 3 }} {{ 4 ** 0.5 }} {{ 0 ** 0 }}", {}),
    ("op_pow_left_assoc", "{{ 2 ** 3 ** 2 }}", {}),
    ("op_neg_pow", "{{ -2 ** 2 }}", {}),
    ("op_big_int", "{{ 2 ** 64 }} {{ 10 ** 20 + 1 }} {{ -(2 ** 63) - 1 }}", {}),
    ("op_float_mix", "{{ 1 + 1.0 }} {{ 3 * 1.1 }} {{ 1 / 3 }} {{ 2 / 3 }} {{ 7.0 // 2 }} {{ 7 % 2.5 }} {{ 10.0 ** 20 }}", {}),
    ("op_str_concat_repeat", "{{ 'a' + 'b' }} {{ 'ab' * 3 }} {{ 3 * 'x' }} [{{ 'a' * 0 }}] [{{ 'a' * -1 }}]", {}),
    ("op_list_concat_repeat", "{{ [1, 2] + [3] }} {{ [0] * 3 }} {{ (1,) + (2,) }}", {}),
    ("op_tilde", "{{ 1 ~ 2 }} {{ 'a' ~ none }} {{ 'a' ~ nothing ~ 'b' }} {{ 1.0 ~ true }} {{ [1] ~ {'a': 1} }}", {}),
    ("op_tilde_then_mul", "{{ 'n=' ~ 2 * 3 }}", {}),
    ("op_tilde_then_plus_error", "{{ 'a' ~ 1 + 2 }}", {}),
    ("op_tilde_parens", "{{ 'a' ~ (1 + 2) }} {{ (1 + 2) ~ 'a' }}", {}),
    ("op_compare", "{{ 1 < 2 }} {{ 2 <= 2 }} {{ 'a' < 'b' }} {{ 'B' < 'a' }} {{ [1, 2] < [1, 3] }} {{ 1 != 1.0 }}", {}),
    ("op_eq_across_types",
     "{{ 1 == 1.0 }} {{ 1 == true }} {{ 0 == false }} {{ none == false }} {{ '1' == 1 }} {{ [1] == [1] }} {{ (1,) == [1] }}",
     {}),
    ("op_chained_compare", "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 < 3 > 2 }} {{ 1 == 1 == 1 }}", {}),
    ("op_compare_type_error", "{{ 1 < 'a' }}", {}),
    ("op_in", "{{ 'b' in 'abc' }} {{ '' in 'abc' }} {{ 2 in [1, 2] }} {{ 'a' in {'a': 1} }} {{ 1 not in [2] }} "
              "{{ 'x' not in 'xyz' }} {{ (1, 2) in [(1, 2)] }} {{ 1 in {'1': 0} }}", {}),
    ("op_in_undefined", "{{ 'a' in nothing }} {{ 'a' not in nothing }}", {}),
    ("op_in_none_error", "{{ 'a' in n }}", {"n": None}),
    ("op_and_or_operands",
     "{{ 0 or 'x' }}|{{ 'a' and 'b' }}|{{ [] or none }}|{{ '' and 1 }}|{{ nothing or 'd' }}|{{ 0 and nothing }}|{{ 1 and [] }}",
     {}),
    ("op_not", "{{ not 0 }} {{ not 'a' }} {{ not [] }} {{ not none }} {{ not nothing }} {{ not not 2 }}", {}),
    ("op_not_precedence", "{{ not 1 == 2 }} {{ not 1 in [1] }} {{ (not 1) == 2 }} {{ not 0 and 0 }}", {}),
    ("op_neg_binds_into_filter", "{{ -x|abs }} {{ -(x|abs) }} {{ -3|abs }}", {"x": 3}),
    ("op_precedence_arith", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 * 3 ** 2 }} {{ 10 - 2 - 3 }} {{ 100 / 10 / 5 }} {{ 2 + 7 % 4 }}", {}),
    ("op_test_binds_tighter_than_plus", "{{ 1 + 1 is number }} {{ 9 is divisibleby 2 + 1 }}", {}),
    ("op_filter_binds_tighter_than_compare", "{{ xs|length > 1 }} {{ not xs|length }} {{ xs|length + 1 }}", {"xs": [1, 2]}),
    ("op_inline_if", "{{ 'y' if x else 'n' }} {{ 'y' if not x else 'n' }} [{{ 'y' if not x }}]", {"x": True}),
    ("op_inline_if_nested", "{{ 'a' if n == 1 else 'b' if n == 2 else 'c' }}{{ 'a' if n == 1 else ('b' if n == 3 else 'c') }}", {"n": 2}),
    ("op_inline_if_no_else_undefined", "{{ (1 if false) is defined }} {{ (1 if false) is none }} [{{ (1 if false) ~ 'x' }}]", {}),
    ("op_unary_plus_minus", "{{ +3 }} {{ -(-3) }} {{ - -3 }} {{ -x }} {{ -1.5 }}", {"x": 2}),
    ("op_div_by_zero_error", "{{ 1 / 0 }}", {}),
    ("op_mod_by_zero_error", "{{ x % 0 }}", {"x": 5}),
    ("op_str_plus_int_error", "{{ 'a' + 1 }}", {}),
    ("op_str_mod_format", "{{ '%s has %d items (%.2f)' % ('list', 3, 3.14159) }} {{ '%s' % none }} {{ '%5s|%-5s|' % ('a', 'b') }} {{ '%s' % [1, 2] }}", {}),
    ("op_neg_undefined_error", "{{ -nothing }}", {}),
    ("op_undefined_plus_error", "{{ nothing + 1 }}", {}),
]

UNDEFINED = [
    ("undef_print", "[{{ nothing }}]", {}),
    ("undef_is_defined", "{{ nothing is defined }} {{ nothing is undefined }} {{ x is defined }} {{ n is defined }} {{ n is none }}",
     {"x": 1, "n": None}),
    ("undef_attr_of_undefined_error", "{{ nothing.attr }}", {}),
    ("undef_missing_key", "[{{ d.missing }}][{{ d['missing'] }}][{{ d.missing is defined }}]", {"d": {"a": 1}}),
    ("undef_missing_key_chain_error", "{{ d.missing.x }}", {"d": {"a": 1}}),
    ("undef_attr_of_none", "[{{ n.x }}][{{ x.foo }}][{{ 'abc'.foo }}]", {"n": None, "x": 5}),
    ("undef_attr_of_none_chain_error", "{{ n.x.y }}", {"n": None}),
    ("undef_default", "{{ nothing|default('d') }} {{ nothing|d('e') }} {{ n|default('f') }} {{ n|default('g', true) }} "
                      "[{{ ''|default('h') }}] {{ ''|d('i', true) }} {{ false|default('j') }} {{ 0|d('k', boolean=true) }} {{ nothing|d }}",
     {"n": None}),
    ("undef_length", "{{ nothing|length }} {{ nothing|count }}", {}),
    ("undef_iterate", "{% for x in nothing %}x{% else %}empty{% endfor %}", {}),
    ("undef_through_filters", "[{{ nothing|upper }}][{{ nothing|string }}][{{ nothing|list }}][{{ nothing|join(',') }}][{{ nothing|trim }}]"
                              "[{{ nothing|first }}][{{ nothing|sum }}][{{ nothing|wordcount }}][{{ nothing|center(4) }}][{{ nothing|sort }}][{{ nothing|min }}]", {}),
    ("undef_int_filter_error", "{{ nothing|int }}", {}),
    ("undef_indent_filter_error", "{{ nothing|indent }}", {}),
    ("undef_tojson_error", "{{ nothing|tojson }}", {}),
    ("undef_index_error", "{{ nothing[0] }}", {}),
    ("undef_call_error", "{{ nothing() }}", {}),
    ("undef_compare", "{{ nothing == none }} {{ nothing is none }} {{ nothing == other }} {{ nothing != '' }}", {}),
    ("undef_if", "{% if nothing %}t{% else %}f{% endif %}{% if not nothing %}!{% endif %}{% if nothing is not defined %}?{% endif %}", {}),
    ("undef_out_of_range", "[{{ xs[5] }}][{{ xs[-5] }}][{{ 'abc'[9] }}][{{ loop }}]", {"xs": [1, 2]}),
]

SCOPING = [
    ("scope_set_in_for_no_accumulate", "{% set c = 0 %}{% for x in xs %}{% set c = c + x %}{{ c }},{% endfor %}|{{ c }}", {"xs": [1, 2, 3]}),
    ("scope_set_in_for_read_before", "{% set c = 'out' %}{% for x in xs %}{{ c }}>{% set c = x %}{{ c }};{% endfor %}{{ c }}", {"xs": [1, 2]}),
    ("scope_set_in_if_leaks", "{% if true %}{% set y = 'in' %}{% endif %}{{ y }}", {}),
    ("scope_set_in_if_inside_for", "{% for x in xs %}{% if x == 2 %}{% set found = x %}{% endif %}{% endfor %}[{{ found }}]", {"xs": [1, 2, 3]}),
    ("scope_namespace_accumulate", "{% set ns = namespace(total=0) %}{% for x in xs %}{% set ns.total = ns.total + x %}{% endfor %}{{ ns.total }}", {"xs": [1, 2, 3]}),
    ("scope_namespace_list", "{% set ns = namespace(items=[]) %}{% for x in xs %}{% set ns.items = ns.items + [x * 2] %}{% endfor %}{{ ns.items }}", {"xs": [1, 2, 3]}),
    ("scope_namespace_print", "{% set ns = namespace(a=1, b='x') %}{% set ns.c = [1] %}{{ ns }} {{ ns.a }}{{ ns.c }}", {}),
    ("scope_namespace_dict_arg", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }} [{{ namespace().x }}]", {}),
    ("scope_set_attr_non_namespace_error", "{% set d.x = 1 %}", {"d": {}}),
    ("scope_macro_sees_globals", "{% set g = 'G' %}{% macro m() %}{{ g }}|{{ v }}{% endmacro %}{{ m() }}", {"v": "V"}),
    ("scope_macro_sees_later_set", "{% macro m() %}[{{ g }}]{% endmacro %}{{ m() }}{% set g = 'G' %}{{ m() }}", {}),
    ("scope_macro_no_loop_vars", "{% macro m() %}[{{ x }}]{% endmacro %}{% for x in [1] %}{{ m() }}{% endfor %}", {}),
    ("scope_with_block", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]", {}),
    ("scope_set_tuple_unpack", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c, d = [3, 4] %}{{ c }}{{ d }}{% set e, f = 'xy' %}{{ e }}{{ f }}", {}),
    ("scope_set_unpack_error", "{% set a, b = [1] %}", {}),
    ("macro_default_args", "{% macro m(a, b='B', c=none) %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ m(1) }}|{{ m(1, 2) }}|{{ m(1, c=3) }}|{{ m() }}", {}),
    ("macro_default_refers_arg", "{% macro m(a, b=a * 2) %}{{ a }},{{ b }}{% endmacro %}{{ m(3) }}", {}),
    ("macro_varargs_kwargs", "{% macro m(a) %}{{ a }} {{ varargs }} {{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k='v', z=0) }}|{{ m(1) }}", {}),
    ("macro_too_many_args_error", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", {}),
    ("macro_unknown_kwarg_error", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(b=1) }}", {}),
    ("macro_return_is_string", "{% macro m() %}ab{% endmacro %}{{ m()|length }} {{ m() ~ 'c' }} {{ m() is string }} {{ m() + 'd' }}", {}),
    ("macro_caller", "{% macro box() %}[{{ caller() }}]{% endmacro %}{% call box() %}inner{% endcall %}", {}),
    ("macro_caller_args", "{% macro each(xs) %}{% for x in xs %}{{ caller(x, loop.index) }}{% endfor %}{% endmacro %}"
                          "{% call(item, i) each(['a', 'b']) %}{{ i }}={{ item }};{% endcall %}", {}),
    ("macro_recursive", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}", {}),
    ("macro_recursive_tree", "{% macro show(nodes) %}{% for n in nodes %}{{ n.name }}{% if n.children %}({{ show(n.children) }}){% endif %}{% endfor %}{% endmacro %}{{ show(tree) }}",
     {"tree": TREE}),
    ("set_block", "{% set x %}a{{ 1 + 1 }}b{% endset %}[{{ x }}] {{ x|length }}", {}),
    ("set_block_filter", "{% set x | upper | replace('A', '4') %}abc{% endset %}{{ x }}", {}),
    ("filter_block", "{% filter upper %}hi {{ name }}{% endfilter %}", {"name": "bob"}),
    ("filter_block_args", "{% filter replace('a', 'o') %}banana{% endfilter %}", {}),
]

LOOPS = [
    ("loop_vars", "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
                  "{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}", {"xs": ["a", "b", "c"]}),
    ("loop_prev_next", "{% for x in xs %}[{{ loop.previtem }}|{{ x }}|{{ loop.nextitem }}]{% endfor %}", {"xs": ["a", "b", "c"]}),
    ("loop_prev_next_defined", "{% for x in xs %}{{ loop.previtem is defined }}/{{ loop.nextitem is defined }} {% endfor %}", {"xs": [1, 2]}),
    ("loop_cycle", "{% for x in xs %}{{ loop.cycle('odd', 'even') }} {% endfor %}", {"xs": [1, 2, 3]}),
    ("loop_changed", "{% for x in [1, 1, 2, 2, 1] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}", {}),
    ("loop_else", "{% for x in [] %}x{% else %}empty{% endfor %}", {}),
    ("loop_else_after_break", "{% for x in [1, 2] %}{{ x }}{% break %}{% else %}E{% endfor %}", {}),
    ("loop_else_after_later_break", "{% for x in [1, 2, 3] %}{{ x }}{% if x == 2 %}{% break %}{% endif %}{% else %}E{% endfor %}", {}),
    ("loop_else_after_all_continue", "{% for x in [1, 2] %}{{ x }}{% continue %}{% else %}E{% endfor %}", {}),
    ("loop_else_after_last_continue", "{% for x in [1, 2] %}{{ x }}{% if x == 2 %}{% continue %}{% endif %}{% else %}E{% endfor %}", {}),
    ("loop_filtered", "{% for x in xs if x is odd %}{{ x }}({{ loop.index }}/{{ loop.length }}){{ ',' if not loop.last }}{% endfor %}",
     {"xs": [1, 2, 3, 4, 5]}),
    ("loop_filtered_else", "{% for x in xs if x > 10 %}{{ x }}{% else %}none{% endfor %}", {"xs": [1, 2]}),
    ("loop_unpack_items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {"d": {"b": 1, "a": 2, "c": 3}}),
    ("loop_dictsort", "{% for k, v in d|dictsort %}{{ k }}={{ v }};{% endfor %}", {"d": {"b": 1, "a": 2, "C": 3}}),
    ("loop_string", "{% for c in 'hé😀' %}[{{ c }}]{% endfor %}", {}),
    ("loop_dict_keys", "{% for k in d %}{{ k }},{% endfor %}", {"d": {"z": 1, "a": 2}}),
    ("loop_break_continue", "{% for x in range(10) %}{% if x is odd %}{% continue %}{% endif %}{% if x > 6 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("loop_nested_outer", "{% for a in [1, 2] %}{% set outer = loop %}{% for b in 'xy' %}{{ outer.index }}{{ b }}{{ loop.index }} {% endfor %}{% endfor %}", {}),
    ("loop_nested_lengths", "{% for a in [1, 2] %}{% for b in [1, 2, 3] %}{{ loop.length }}{% endfor %}{{ loop.length }}|{% endfor %}", {}),
    ("loop_recursive", "{% for n in tree recursive %}{{ n.name }}{{ loop.depth }}{% if n.children %}({{ loop(n.children) }}){% endif %}{% endfor %}",
     {"tree": TREE}),
    ("loop_var_after_loop", "{% for x in [1, 2] %}{% endfor %}[{{ x }}]", {}),
    ("loop_unpack_mismatch_error", "{% for a, b in [[1, 2, 3]] %}{% endfor %}", {}),
    ("loop_over_none_error", "{% for x in n %}{% endfor %}", {"n": None}),
    ("loop_over_int_error", "{% for x in 3 %}{% endfor %}", {}),
    ("loop_reversed_slice", "{% for m in xs[::-1] %}{{ loop.index0 }}{{ m }} {% endfor %}", {"xs": ["a", "b", "c"]}),
    ("loop_unpack_mixed", "{% for a, b in [(1, 'x'), [2, 'y'], 'zw'] %}{{ a }}{{ b }}{% endfor %}", {}),
    ("loop_break_outside_error", "{% break %}", {}),
]

FILTERS = [
    # tojson (transformers' version)
    ("tojson_basic", "{{ d|tojson }}", {"d": {"b": 1, "a": [1, 2.5, None, True], "c": "é"}}),
    ("tojson_indent_int", "{{ d|tojson(indent=2) }}", {"d": {"b": 1, "a": [1, {"x": None}], "c": "é"}}),
    ("tojson_indent_str", "{{ d|tojson(indent='\\t') }}|{{ [1]|tojson(indent='--') }}", {"d": {"a": [1, 2]}}),
    ("tojson_indent_zero", "{{ [1, [2], {'a': 3}]|tojson(indent=0) }}", {}),
    ("tojson_indent_empty_containers", "{{ {'a': [], 'b': {}, 'c': [[]]}|tojson(indent=2) }}", {}),
    ("tojson_separators", "{{ d|tojson(separators=(',', ':')) }} {{ d|tojson(separators=[';', '=']) }}", {"d": {"a": [1, 2], "b": None}}),
    ("tojson_separators_with_indent", "{{ d|tojson(indent=1, separators=(',', ': ')) }}", {"d": {"a": [1, 2]}}),
    ("tojson_sort_keys", "{{ d|tojson(sort_keys=true) }}", {"d": {"b": 1, "a": {"d": 2, "c": 3}, "B": 0}}),
    ("tojson_ensure_ascii", "{{ s|tojson(ensure_ascii=true) }} {{ s|tojson(ensure_ascii=false) }} {{ s|tojson }}", {"s": "é😀\u2028"}),
    ("tojson_escaping", "{{ s|tojson }}", {"s": "a\"b\\c/d\n\t\r\b\f\u0001\u001f\u007f\u2028<>&'"}),
    ("tojson_positional_arg", "{{ d|tojson(2) }}", {"d": {"a": "é", "b": [1]}}),
    ("tojson_floats", "{{ [1.0, 1e16, 0.1 + 0.2, -0.0, 1e-5, 2 ** 64, 1.5e300, 3] | tojson }}", {}),
    ("tojson_nonstr_keys", "{{ {2: 'a', true: 'b', none: 'c', 2.5: 'd'}|tojson }}", {}),
    ("tojson_scalars", "{{ (1, 'a')|tojson }} {{ 'plain'|tojson }} {{ none|tojson }} {{ true|tojson }} {{ ''|tojson }} {{ 5|tojson }}", {}),
    ("tojson_markup", "{{ ('<b>'|safe)|tojson }} {{ '<b>'|e|tojson }}", {}),
    ("tojson_generator_error", "{{ xs|map('upper')|tojson }}", {"xs": ["a"]}),
    ("tojson_sort_keys_mixed_error", "{{ {1: 'a', 'b': 2}|tojson(sort_keys=true) }}", {}),
    # length / string / trim / items / join / list
    ("filter_length", "{{ 'héllo'|length }} {{ [1, 2]|length }} {{ {'a': 1}|length }} {{ ''|count }} {{ '😀'|length }} {{ (1, 2, 3)|count }}", {}),
    ("filter_length_generator_error", "{{ messages|selectattr('role', 'equalto', 'user')|length }}", {"messages": MESSAGES}),
    ("filter_length_int_error", "{{ 5|length }}", {}),
    ("filter_string", "{{ [1, 'a']|string }} {{ none|string }} {{ 1.0|string }} {{ {'k': none}|string }} {{ 'x'|string }}", {}),
    ("filter_trim", "[{{ '  a b \n'|trim }}][{{ 'xxaxyx'|trim('x') }}][{{ '-=a=-'|trim('-=') }}][{{ '\t x\u3000'|trim }}]", {}),
    ("filter_items", "{{ d|items|list }} {% for k, v in d|items %}{{ k }}{{ v }}{% endfor %}", {"d": {"b": 1, "a": 2}}),
    ("filter_join", "{{ [1, 2, 3]|join }} {{ [1, 2]|join(', ') }} {{ ['a', none, 1.5, true]|join('-') }} {{ 'abc'|join('.') }} [{{ []|join(',') }}]", {}),
    ("filter_join_attribute", "{{ users|join(', ', attribute='name') }}", {"users": USERS}),
    ("filter_list", "{{ 'abc'|list }} {{ {'a': 1, 'b': 2}|list }} {{ (1, 2)|list }} {{ range(3)|list }}", {}),
    ("filter_list_of_none_error", "{{ n|list }}", {"n": None}),
    # default is in UNDEFINED; Markup
    ("markup_safe_plus_str", "{{ '<a>'|safe + '<b>' }}", {}),
    ("markup_str_plus_safe", "{{ 'x<' + '<b>'|safe }}", {}),
    ("markup_upper", "{{ ('<a>'|safe)|upper }} {{ '<a>'|safe|upper }}", {}),
    ("markup_escape", "{{ s|e }} {{ s|escape }}", {"s": "<a href=\"x\">Tom & 'Jerry'</a>"}),
    ("markup_tilde", "{{ '<a>'|safe ~ '<b>' }}", {}),
    ("markup_escape_twice", "{{ s|e|e }}", {"s": "<&>"}),
    ("markup_percent_format", "{{ ('%s!'|safe) % '<x>' }} {{ '%s!' % ('<x>'|safe) }}", {}),
    ("markup_join", "{{ ['<a>'|safe, '<b>']|join(',') }} {{ ['<a>', '<b>']|join(','|safe) }}", {}),
    ("markup_escape_nonstr", "{{ 5|e }} {{ none|e }} {{ [1, '<']|e }}", {}),
    ("markup_safe_length_compare", "{{ '<a>'|safe|length }} {{ '<a>'|safe == '<a>' }} {{ '<a>'|e|length }}", {}),
    # selectattr / rejectattr / select / reject
    ("selectattr_equalto", "{{ messages|selectattr('role', 'equalto', 'assistant')|map(attribute='content')|list }}", {"messages": MESSAGES}),
    ("selectattr_truthy", "{{ messages|selectattr('tool_calls')|list|length }} {{ messages|selectattr('content')|list|length }}", {"messages": MESSAGES}),
    ("selectattr_defined", "{{ messages|selectattr('tool_calls', 'defined')|map(attribute='role')|list }} "
                           "{{ messages|selectattr('tool_call_id', 'undefined')|list|length }}", {"messages": MESSAGES}),
    ("selectattr_none_string", "{{ messages|selectattr('content', 'none')|list|length }} {{ messages|selectattr('content', 'string')|list|length }}",
     {"messages": MESSAGES}),
    ("rejectattr_eq", "{{ messages|rejectattr('role', 'eq', 'system')|map(attribute='role')|join(',') }} "
                      "{{ messages|rejectattr('role', 'in', ['tool', 'system'])|map(attribute='role')|join(',') }}", {"messages": MESSAGES}),
    ("select_reject", "{{ [0, 1, '', 'a', none, [], [0]]|select|list }} {{ [1, 2, 3, 4]|reject('odd')|list }} {{ [1, 5, 3]|select('gt', 2)|list }} "
                      "{{ [1, none, 2]|reject('none')|list }} {{ ['a', 'B']|select('lower')|list }} {{ [1, 2, 3]|select('in', [2, 3])|list }}", {}),
    ("select_generator_truthy", "{% if [] | select %}truthy{% else %}falsy{% endif %}", {}),
    ("selectattr_empty_truthy",
     "{% if messages|selectattr('role', 'equalto', 'nobody') %}yes{% else %}no{% endif %}|"
     "{% if messages|selectattr('role', 'equalto', 'nobody')|list %}yes{% else %}no{% endif %}", {"messages": MESSAGES}),
    ("select_unknown_test_error", "{{ [1]|select('nope')|list }}", {}),
    # map
    ("map_attribute", "{{ users|map(attribute='name')|list }}", {"users": USERS}),
    ("map_attribute_default", "{{ users|map(attribute='age', default=0)|list }}", {"users": USERS}),
    ("map_attribute_missing_repr", "{{ users|map(attribute='age')|list }}", {"users": USERS}),
    ("map_attribute_missing_join", "{{ users|map(attribute='age')|join(',') }}", {"users": USERS}),
    ("map_filter_name", "{{ ['a', 'b']|map('upper')|list }} {{ [-1, 2]|map('abs')|list }} {{ ['1', 'x']|map('int')|list }} {{ [1, 2]|map('string')|list }}", {}),
    ("map_filter_args", "{{ ['aa', 'ba']|map('replace', 'a', 'o')|list }} {{ [1.234, 5.678]|map('round', 1)|list }} {{ [n, 'x']|map('default', 'd')|list }}",
     {"n": None}),
    ("map_dotted_attribute", "{{ tools|map(attribute='function.name')|join(', ') }}", {"tools": TOOLS}),
    ("map_index_attribute", "{{ [[1, 2], [3, 4]]|map(attribute='0')|list }} {{ [[1, 2], [3, 4]]|map(attribute=1)|list }}", {}),
    ("map_no_args_error", "{{ [1]|map|list }}", {}),
    # dictsort
    ("dictsort_default", "{{ d|dictsort }}", {"d": {"b": 1, "a": 3, "C": 2}}),
    ("dictsort_case_sensitive", "{{ d|dictsort(true) }}", {"d": {"b": 1, "a": 3, "C": 2}}),
    ("dictsort_by_value", "{{ d|dictsort(by='value') }} {{ d|dictsort(false, 'value', true) }}", {"d": {"b": 1, "a": 3, "C": 2}}),
    ("dictsort_reverse", "{{ d|dictsort(reverse=true) }}", {"d": {"b": 1, "a": 3, "C": 2}}),
    # case
    ("filter_case", "{{ 'HeLLo wOrld'|lower }} {{ 'straße'|upper }} {{ 'hELLO world'|capitalize }} {{ 'éa'|upper }} {{ 'ǅ'|lower }}", {}),
    ("filter_title_vs_method", "{{ s|title }} | {{ s.title() }}", {"s": "it's a dog-eat-dog (o'neil) x1y"}),
    # indent
    ("filter_indent_default", "{{ 'a\nb\n\nc'|indent }}|", {}),
    ("filter_indent_first_blank", "{{ 'a\nb\n\nc'|indent(2, true, true) }}|", {}),
    ("filter_indent_str", "{{ 'a\nb'|indent('> ', first=true) }}|", {}),
    ("filter_indent_trailing_newline", "{{ 'a\nb\n'|indent(2) }}|", {}),
    ("filter_indent_crlf_var", "{{ s|indent(2) }}|", {"s": "a\r\nb\rc"}),
    # int / float
    ("filter_int", "{{ '42'|int }} {{ '3.7'|int }} {{ 3.9|int }} {{ -3.9|int }} {{ 'abc'|int }} {{ 'abc'|int(-1) }} {{ '0x1A'|int(base=16) }} "
                   "{{ '1e3'|int }} {{ true|int }} {{ none|int }} {{ ' 7 '|int }} {{ '1_000'|int }} {{ '0b11'|int(0, 0) }}", {}),
    ("filter_float", "{{ '3.5'|float }} {{ 'x'|float }} {{ 'x'|float(1.5) }} {{ 3|float }} {{ '1e3'|float }} {{ ' 2 '|float }} {{ 'nan'|float }} {{ '-inf'|float }}", {}),
    # replace
    ("filter_replace", "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'abc'|replace('', '-') }} {{ 'a.b'|replace('.', '') }} {{ 12|replace('1', 'x') }}", {}),
    # sort / unique
    ("filter_sort", "{{ xs|sort }} {{ xs|sort(case_sensitive=true) }} {{ xs|sort(reverse=true) }} {{ [3, 1, 2.5]|sort }}", {"xs": ["b", "C", "a"]}),
    ("filter_sort_attribute", "{{ users|sort(attribute='age')|map(attribute='name')|join(',') }} {{ users|sort(attribute='age,name', reverse=true)|map(attribute='name')|join(',') }}",
     {"users": USERS_AGED}),
    ("filter_sort_mixed_error", "{{ [1, 'a']|sort }}", {}),
    ("filter_unique", "{{ ['a', 'A', 'b', 'a']|unique|list }} {{ ['a', 'A']|unique(case_sensitive=true)|list }} {{ users|unique(attribute='age')|map(attribute='name')|list }}",
     {"users": USERS_AGED}),
    # first / last / reverse
    ("filter_first_last", "{{ [1, 2, 3]|first }} {{ [1, 2, 3]|last }} {{ 'abc'|first }} {{ 'abc'|last }} [{{ []|first }}][{{ []|last }}]", {}),
    ("filter_reverse", "{{ 'héllo'|reverse }} {{ [1, 2, 3]|reverse|list }} {{ [1, 2, 3]|reverse|join(',') }} {{ (1, 2)|reverse|list }}", {}),
    # abs / round
    ("filter_abs", "{{ -3|abs }} {{ -2.5|abs }} {{ (-3)|abs }} {{ x|abs }} {{ -0.0|abs }}", {"x": -4}),
    ("filter_round", "{{ 2.5|round }} {{ 3.5|round }} {{ 3.14159|round(2) }} {{ 2.675|round(2) }} {{ 42|round }} {{ 42.0|round }} {{ -2.5|round }}", {}),
    ("filter_round_methods", "{{ 2.1|round(method='ceil') }} {{ 2.9|round(0, 'floor') }} {{ 2.5|round(method='common') }} {{ 42|round(method='floor') }} "
                             "{{ 1.25|round(1, 'ceil') }} {{ -2.5|round(method='ceil') }}", {}),
    ("filter_round_bad_method_error", "{{ 1.5|round(method='up') }}", {}),
    # sum / min / max
    ("filter_sum", "{{ [1, 2, 3]|sum }} {{ [0.1, 0.2]|sum }} {{ users|sum(attribute='age') }} {{ [1, 2]|sum(start=10) }} {{ []|sum }}", {"users": USERS_AGED}),
    ("filter_min_max", "{{ [3, 1, 2]|min }} {{ [3, 1, 2]|max }} {{ ['b', 'A', 'c']|min }} {{ ['a', 'B']|max }} {{ ['a', 'B']|max(case_sensitive=true) }} "
                       "{{ (users|max(attribute='age')).name }} [{{ []|min }}] {{ 'hello'|max }}", {"users": USERS_AGED}),
    # wordcount / center / truncate / batch / format / attr
    ("filter_wordcount", "{{ 'hello  big\nworld'|wordcount }} {{ ''|wordcount }} {{ \"it's ok-ish, fine.\"|wordcount }}", {}),
    ("filter_center", "[{{ 'ab'|center(6) }}][{{ 'abc'|center(6) }}][{{ 'abc'|center(2) }}][{{ 'x'|center }}]", {}),
    ("filter_truncate", "{{ s|truncate(9) }}|{{ s|truncate(9, true) }}|{{ s|truncate(9, false, '…', 0) }}|{{ 'short'|truncate(9) }}|"
                        "{{ 'hello world'|truncate(10) }}|{{ s|truncate(17) }}", {"s": "hello world foo bar"}),
    ("filter_batch", "{{ range(5)|batch(2)|list }} {{ range(5)|batch(2, 'x')|list }}", {}),
    ("filter_format", "{{ '%s-%d'|format('a', 3) }} {{ '%(k)s!'|format(k='v') }} {{ '%05.1f'|format(3.14159) }} {{ '%x'|format(255) }} {{ '%r'|format('a') }}", {}),
    ("filter_attr", "[{{ d|attr('a') }}][{{ d.a }}]{% set ns = namespace(x=5) %}[{{ ns|attr('x') }}]", {"d": {"a": 1}}),
    ("filter_unknown_error", "{{ 1|nosuchfilter }}", {}),
    ("filter_unknown_in_untaken_branch", "{% if false %}{{ 1|nosuchfilter }}{% endif %}ok", {}),
    ("filter_unknown_in_taken_branch_error", "{% if true %}{{ 1|nosuchfilter }}{% endif %}ok", {}),
    ("filter_wrong_arg_count_error", "{{ 'a'|replace('a') }}", {}),
]

TESTS = [
    ("test_none_boolean_true_false", "{{ none is none }} {{ 0 is none }} {{ true is boolean }} {{ 1 is boolean }} {{ true is true }} {{ 1 is true }} "
                                     "{{ false is false }} {{ 0 is false }}", {}),
    ("test_number_kinds", "{{ 1 is integer }} {{ 1.0 is integer }} {{ true is integer }} {{ 1.0 is float }} {{ 1 is float }} {{ 1 is number }} "
                          "{{ 1.5 is number }} {{ true is number }} {{ '1' is number }} {{ big is integer }}", {"big": 2 ** 70}),
    ("test_string_mapping", "{{ 'a' is string }} {{ none is string }} {{ {} is mapping }} {{ [] is mapping }} {{ d is mapping }} {{ ('<a>'|safe) is string }}",
     {"d": {"a": 1}}),
    ("test_iterable_sequence", "{{ 'a' is iterable }} {{ 5 is iterable }} {{ {} is iterable }} {{ 'a' is sequence }} {{ {} is sequence }} {{ [] is sequence }} "
                               "{{ range(2) is sequence }} {{ none is iterable }} {{ ([1]|select) is iterable }} {{ ([1]|select) is sequence }}", {}),
    ("test_callable", "{{ range is callable }} {{ 'a'.upper is callable }} {{ 'a' is callable }} {{ raise_exception is callable }} {{ namespace is callable }} {{ d.items is callable }}",
     {"d": {}}),
    ("test_sameas", "{{ none is sameas none }} {{ true is sameas true }} {{ 1 is sameas true }} {{ [] is sameas [] }} {{ x is sameas x }} {{ false is sameas 0 }}",
     {"x": [1]}),
    ("test_compare_family", "{{ 1 is eq 1 }} {{ 1 is equalto 1 }} {{ 1 is eq(1.0) }} {{ 'a' is ne 'b' }} {{ 1 is lt 2 }} {{ 2 is gt 1 }} {{ 2 is le 2 }} "
                            "{{ 2 is ge 3 }} {{ 2 is greaterthan 1 }} {{ 1 is lessthan 0 }}", {}),
    ("test_operator_as_name_error", "{{ 'a' is == 'a' }}", {}),
    ("test_in", "{{ 'a' is in 'abc' }} {{ 2 is in [1, 2] }} {{ 'k' is in {'k': 1} }} {{ 3 is not in [1] }}", {}),
    ("test_divisibleby_even_odd", "{{ 9 is divisibleby 3 }} {{ 9 is divisibleby(2) }} {{ 4 is even }} {{ 3 is even }} {{ 3 is odd }} {{ 0 is even }} "
                                  "{{ -3 is odd }} {{ 4.0 is even }}", {}),
    ("test_lower_upper", "{{ 'abc' is lower }} {{ 'aBc' is lower }} {{ 'ABC' is upper }} {{ '' is lower }} {{ 'a1' is lower }} {{ '1' is upper }} {{ 'É' is upper }}", {}),
    ("test_is_not", "{{ x is not none }} {{ x is not defined }} {{ not x is none }} {{ 3 is not divisibleby 2 }} {{ 'a' is not string }}", {"x": 0}),
    ("test_arg_no_parens_and", "{{ 9 is divisibleby 3 and 4 is even }} {{ x is sameas false or 1 }} {{ 'a' is in 'cat' }}", {"x": False}),
    ("test_defined_on_message", "{{ m.tool_calls is defined }} {{ m.content is defined }} {{ m.content is none }} {{ m['role'] is string }} {{ 'tool_calls' in m }}",
     {"m": {"role": "assistant", "content": None}}),
    ("test_unknown_error", "{{ 1 is nosuchtest }}", {}),
]

METHODS = [
    ("str_strip", "[{{ '  a  '.strip() }}][{{ 'xxaxx'.strip('x') }}][{{ '  a  '.lstrip() }}][{{ '  a  '.rstrip() }}][{{ '\\n\\nhi\\n'.lstrip('\\n') }}]"
                  "[{{ 'abcba'.rstrip('ab') }}][{{ '\\u3000a\\t'.strip() }}]", {}),
    ("str_split", "{{ 'a  b\\tc\\n'.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ ''.split() }} {{ ''.split(',') }} "
                  "{{ ' a b c '.split(maxsplit=1) }} {{ 'a b'.split(' ', -1) }}", {}),
    ("str_rsplit", "{{ 'a,b,c'.rsplit(',', 1) }} {{ ' a b '.rsplit() }} {{ 'a  b'.rsplit(None, 1) }}", {}),
    ("str_split_think", "{{ c.split('</think>')[-1].lstrip('\\n') }}|{{ c.split('</think>')[0].split('<think>')[-1].strip('\\n') }}|{{ c.split('<none>')|length }}",
     {"c": MESSAGES[4]["content"]}),
    ("str_split_empty_sep_error", "{{ 'abc'.split('') }}", {}),
    ("str_splitlines", "{{ 'a\\nb\\r\\nc\\n'.splitlines() }} {{ 'a\\n\\nb'.splitlines() }} {{ ''.splitlines() }} {{ 'x\\n'.splitlines(true) }}", {}),
    ("str_startswith_endswith", "{{ 'hello'.startswith('he') }} {{ 'hello'.startswith(('x', 'h')) }} {{ 'hello'.endswith('lo') }} "
                                "{{ 'hello'.endswith(('a', 'b')) }} {{ 'hello'.startswith('l', 2) }} {{ 'hello'.startswith('') }}", {}),
    ("str_replace_count", "{{ 'aaaa'.replace('a', 'b', 2) }} {{ 'x'.replace('', '-') }} {{ 'abab'.replace('ab', '') }}", {}),
    ("str_case_methods", "{{ 'Hi There'.upper() }} {{ 'Hi There'.lower() }} {{ \"it's o'neil\".title() }} {{ 'hELLO wORLD'.capitalize() }} {{ 'Hi'.swapcase() }}", {}),
    ("str_find_count", "{{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.find('z') }} {{ 'hello'.index('e') }} {{ 'hello'.count('l') }} "
                       "{{ 'aaa'.count('aa') }} {{ 'héllo'.find('l') }}", {}),
    ("str_index_missing_error", "{{ 'hello'.index('z') }}", {}),
    ("str_join", "{{ ', '.join(['a', 'b']) }} [{{ ''.join(xs) }}] {{ '-'.join('abc') }}", {"xs": ["x", "y"]}),
    ("str_join_nonstr_error", "{{ ','.join([1, 2]) }}", {}),
    ("str_predicates", "{{ '123'.isdigit() }} {{ '12a'.isdigit() }} {{ 'abc'.isalpha() }} {{ ' \\t'.isspace() }} {{ ''.isspace() }} {{ 'a1'.isalnum() }} "
                       "{{ 'ABC'.isupper() }} {{ 'abc'.islower() }} {{ 'Ab Cd'.istitle() }} {{ '²'.isdigit() }} {{ '²'.isdecimal() }} {{ 'é'.isalpha() }}", {}),
    ("str_pad_methods", "{{ '42'.zfill(5) }} {{ '-42'.zfill(5) }} {{ 'ab'.ljust(4, '.') }}|{{ 'ab'.rjust(4) }}|{{ 'ab'.center(5, '*') }}", {}),
    ("str_format_method", "{{ '{} + {} = {}'.format(1, 2, 3) }} {{ '{name}!'.format(name='x') }} {{ '{:>4}|{:.2f}'.format('a', 3.14159) }} {{ '{0}{0}'.format('ab') }}", {}),
    ("dict_get", "[{{ d.get('a') }}][{{ d.get('x') }}][{{ d.get('x', 'dflt') }}][{{ d.get('n', 'dflt') }}]", {"d": {"a": 1, "n": None}}),
    ("dict_items_keys_values", "{{ d.items()|list }} {{ d.keys()|list }} {{ d.values()|list }}", {"d": {"b": 1, "a": 2}}),
    ("dict_views_print", "{{ d.items() }} {{ d.keys() }} {{ d.values() }}", {"d": {"b": 1, "a": [2]}}),
    ("dict_attr_vs_key", "{{ d['items'] }} {{ d.items is callable }} {{ d['keys'] }} {{ d.keys is number }} {{ d.count }} {{ d.role }}",
     {"d": {"items": [1], "keys": 5, "count": 3, "role": "user"}}),
    ("list_index_count", "{{ xs.index('b') }} {{ xs.count('a') }} {{ xs.index('a', 1) }}", {"xs": ["a", "b", "a"]}),
    ("list_append_error", "{% set xs = [1] %}{{ xs.append(2) }}", {}),
    ("list_pop_error", "{{ xs.pop() }}", {"xs": [1, 2]}),
    ("dict_update_error", "{% set d = {} %}{% set _ = d.update({'a': 1}) %}{{ d }}", {}),
    ("dict_pop_error", "{{ d.pop('a') }}", {"d": {"a": 1}}),
    ("int_dot_index", "{{ xs.0 }} {{ xs.1 }} {{ 'abc'.0 }} {{ m.tool_calls.0.function.name }}", {"xs": ["x", "y"], "m": MESSAGES[2]}),
    ("slice_list", "{{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ xs[::2] }} {{ xs[-1] }} {{ xs[-2] }} {{ xs[1:100] }} {{ xs[5:] }} {{ xs[-100:1] }}",
     {"xs": [1, 2, 3, 4]}),
    ("slice_string_unicode", "{{ s[1:3] }}|{{ s[::-1] }}|{{ s[-1] }}|{{ s[0] }}|{{ s|length }}|{{ s[2:] }}", {"s": "h€llo😀"}),
    ("slice_step_negative", "{{ 'abcdef'[4:1:-1] }} {{ 'abcdef'[::-2] }} {{ 'abcdef'[-2:] }} [{{ 'abc'[2:1] }}]", {}),
    ("slice_zero_step_error", "{{ xs[::0] }}", {"xs": [1]}),
    ("slice_tuple_and_range", "{{ (1, 2, 3)[1:] }} {{ range(10)[2:5]|list }} {{ range(10)[-1] }}", {}),
]

GLOBALS = [
    ("range_forms", "{{ range(4)|list }} {{ range(1, 4)|list }} {{ range(0, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ range(0)|list }} "
                    "{{ range(-2)|list }} {{ range(3)|length }}", {}),
    ("range_print", "{{ range(3) }} {{ range(1, 9, 2) }}", {}),
    ("range_zero_step_error", "{{ range(1, 5, 0)|list }}", {}),
    ("range_reverse_loop", "{% for i in range(messages|length - 1, -1, -1) %}{{ i }}{{ messages[i].role[0] }} {% endfor %}", {"messages": MESSAGES}),
    ("dict_global", "{{ dict(a=1, b='x') }} {{ dict() }} {{ dict(a=1).a }} {{ dict(z=1, a=2)|list }}", {}),
    ("raise_exception_simple", "{{ raise_exception('bad: ' ~ 5) }}", {}),
    ("raise_exception_in_if", "{% if x > 1 %}{{ raise_exception('x must be at most 1') }}{% endif %}ok", {"x": 2}),
    ("raise_exception_not_reached", "{% if x > 1 %}{{ raise_exception('x must be at most 1') }}{% endif %}ok", {"x": 1}),
    ("strftime_formats", "{{ strftime_now('%Y-%m-%d') }}|{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%B %d, %Y') }}|{{ strftime_now('%A') }}|"
                         "{{ strftime_now('%H:%M:%S') }}|{{ strftime_now('%j %a %y') }}", {}),
    ("joiner", "{% set sep = joiner(', ') %}{% for x in xs %}{{ sep() }}{{ x }}{% endfor %}|{% set j = joiner() %}{{ j() }}{{ j() }}", {"xs": [1, 2, 3]}),
    ("cycler", "{% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}", {}),
]

ERRORS = [
    ("err_unclosed_block", "{% if true %}x", {}),
    ("err_unclosed_for", "{% for x in xs %}x", {"xs": [1]}),
    ("err_unclosed_string", "{{ 'abc }}", {}),
    ("err_unclosed_variable", "a {{ x ", {}),
    ("err_unclosed_comment", "a {# x ", {}),
    ("err_endfor_without_for", "{% endfor %}", {}),
    ("err_unknown_tag", "{% foo %}", {}),
    ("err_include_no_loader", "{% include 'x.jinja' %}", {}),
    ("err_extends_no_loader", "{% extends 'base.jinja' %}", {}),
    ("err_call_non_callable", "{{ x() }}", {"x": 1}),
    ("err_syntax_dangling_operator", "{{ 1 + }}", {}),
    ("err_syntax_empty_expression", "{{ }}", {}),
    ("err_else_after_else", "{% if x %}a{% else %}b{% else %}c{% endif %}", {"x": True}),
]

HF = [
    ("hf_chatml",
     "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>' + '\\n' }}{% endfor %}"
     "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
     {"messages": MESSAGES[:2], "add_generation_prompt": True}),
    ("hf_system_extract",
     "{% if messages[0]['role'] == 'system' %}\n    {% set system_message = messages[0]['content'] %}\n    {% set loop_messages = messages[1:] %}\n"
     "{% else %}\n    {% set system_message = 'Default.' %}\n    {% set loop_messages = messages %}\n{% endif %}\n"
     "[SYS]{{ system_message }}\n{% for m in loop_messages %}\n{{ m.role }}: {{ m.content }}\n{% endfor %}",
     {"messages": MESSAGES[:2]}),
    ("hf_alternation_raise",
     "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
     "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
     "{{ '[INST] ' + message['content'] + ' [/INST]' if message['role'] == 'user' else message['content'] + eos_token }}{% endfor %}",
     {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "bos_token": "<s>", "eos_token": "</s>"}),
    ("hf_alternation_ok",
     "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
     "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
     "{{ '[INST] ' + message['content'] + ' [/INST]' if message['role'] == 'user' else message['content'] + eos_token }}{% endfor %}",
     {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], "bos_token": "<s>", "eos_token": "</s>"}),
    ("hf_tool_calls",
     "{% for m in messages if m.tool_calls %}{% for tc in m.tool_calls %}{% set f = tc.function if tc.function is defined else tc %}"
     "<tool_call>{\"name\": \"{{ f.name }}\", \"arguments\": {{ f.arguments|tojson }}}</tool_call>{% endfor %}{% endfor %}",
     {"messages": MESSAGES}),
    ("hf_arguments_string_or_mapping",
     "{% for a in args %}{% if a is string %}{{ a }}{% else %}{{ a|tojson }}{% endif %};{% endfor %}",
     {"args": ["{\"city\": \"Paris\"}", {"city": "Paris"}]}),
    ("hf_tool_call_arguments_items",
     "{% for k, v in messages[2].tool_calls[0].function.arguments.items() %}<{{ k }}>{{ v if v is string else v|tojson }}</{{ k }}>{% endfor %}",
     {"messages": MESSAGES}),
    ("hf_tools_json_lines",
     "{% for tool in tools %}\n{{ tool | tojson }}\n{% endfor %}", {"tools": TOOLS}),
    ("hf_tools_indent4", "{{ tools[0].function|tojson(indent=4) }}", {"tools": TOOLS}),
    ("hf_content_parts",
     "{% if m.content is string %}{{ m.content }}{% else %}{% for p in m.content %}{% if p.type == 'text' %}{{ p.text }}"
     "{% elif p.type == 'image' %}<image>{% endif %}{% endfor %}{% endif %}", {"m": MSG_PARTS}),
    ("hf_content_parts_repr", "{{ m.content }}", {"m": MSG_PARTS}),
    ("hf_last_user_index",
     "{% set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}"
     "{% for message in messages[::-1] %}{% set index = (messages|length - 1) - loop.index0 %}"
     "{% if ns.multi_step_tool and message.role == 'user' and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}"
     "{% set ns.multi_step_tool = false %}{% set ns.last_query_index = index %}{% endif %}{% endfor %}{{ ns.last_query_index }}",
     {"messages": MESSAGES}),
    ("hf_tool_response_grouping",
     "{% for m in messages %}{% if m.role == 'tool' %}{% if loop.first or messages[loop.index0 - 1].role != 'tool' %}<user>{% endif %}"
     "<tool_response>{{ m.content }}</tool_response>{% if loop.last or messages[loop.index0 + 1].role != 'tool' %}</user>{% endif %}"
     "{% else %}<{{ m.role }}>{% endif %}{% endfor %}",
     {"messages": MESSAGES[:3] + [MESSAGES[3], {"role": "tool", "tool_call_id": "call_2", "content": "ok"}]}),
    ("hf_generation_block",
     "{% for m in messages %}{% if m.role == 'assistant' and m.content %}{% generation %}{{ m.content }}{% endgeneration %}{% endif %}{% endfor %}",
     {"messages": MESSAGES}),
    ("hf_date_string",
     "{% if not date_string is defined %}{% set date_string = strftime_now('%d %b %Y') %}{% endif %}Today Date: {{ date_string }}|"
     "{% if not other is defined %}{% set other = 'x' %}{% endif %}{{ other }}", {"other": "given"}),
    ("hf_content_none_tojson", "{{ m.content|tojson }} {{ m.content }} [{{ m.content or '' }}] {{ m.content is none }}", {"m": MESSAGES[2]}),
    ("hf_system_in_tools_prompt",
     "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0].role == 'system' %}\n        {{- messages[0].content + '\\n\\n' }}\n"
     "    {%- endif %}\n    {{- '# Tools\\n<tools>' }}\n    {%- for tool in tools %}\n        {{- '\\n' }}\n        {{- tool | tojson }}\n    {%- endfor %}\n"
     "    {{- '\\n</tools><|im_end|>\\n' }}\n{%- endif %}\n",
     {"messages": MESSAGES, "tools": TOOLS}),
    ("hf_params_properties",
     "{% for name, p in tools[0].function.parameters.properties.items() %}{{ name }}: {{ p.type }}{% if p.enum is defined %} ({{ p.enum|join('|') }}){% endif %}"
     "{% if name in tools[0].function.parameters.required %} required{% endif %}\n{% endfor %}", {"tools": TOOLS}),
    ("hf_keep_reasoning",
     "{% for m in messages %}{% if m.role == 'assistant' and m.content and '</think>' in m.content %}"
     "{% set reasoning = m.content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}"
     "{% set answer = m.content.split('</think>')[-1].lstrip('\\n') %}[{{ reasoning }}]({{ answer }}){% endif %}{% endfor %}",
     {"messages": MESSAGES}),
    ("hf_messages_repr_role_count",
     "{{ messages|map(attribute='role')|list }} {{ messages|selectattr('role', 'equalto', 'assistant')|list|length }} {{ messages[1:3]|length }}",
     {"messages": MESSAGES}),
]

CASES = WHITESPACE + LITERALS + OPERATORS + UNDEFINED + SCOPING + LOOPS + FILTERS + TESTS + METHODS + GLOBALS + ERRORS + HF

# ---------------------------------------------------------------------------------------------

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def render_case(env, template, variables):
    del CTE._raised[:]
    try:
        tmpl = env.from_string(template)
        return {"output": tmpl.render(**variables)}
    except Exception as e:  # every failure is the snippet's answer
        return {"error": str(e), "error_type": type(e).__name__,
                "raised": any(e is r for r in CTE._raised)}


def main():
    ap = argparse.ArgumentParser(description="Reference outputs of Jinja snippets as transformers' environment renders them.")
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--list", action="store_true", help="print one line per case")
    a = ap.parse_args()

    names = [c[0] for c in CASES]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        sys.exit("duplicate case names: " + ", ".join(dup))

    env = CTE.make_env()
    cases = []
    for name, template, variables in CASES:
        # render exactly what the JSON file will hold
        jvars = json.loads(json.dumps(variables, ensure_ascii=False))
        if jvars != variables:
            sys.exit(f"{name}: variables do not survive JSON unchanged")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences in string literals
            r = render_case(env, template, jvars)
        if _ADDRESS.search(r.get("output", "") + r.get("error", "")):
            sys.exit(f"{name}: result holds a memory address (not deterministic): {r!r}")
        case = {"name": name, "template": template, "variables": jvars}
        case.update(r)
        cases.append(case)
        if a.list:
            print(f"{name}: " + (repr(r["output"]) if "output" in r else
                                 f"!{'raise_exception' if r['raised'] else r['error_type']}: {r['error']!r}"))

    doc = {"generator": GENERATOR, "jinja2_version": jinja2.__version__, "now": CTE.NOW.isoformat(), "cases": cases}
    out = CTE.repo_path(a.out)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w", encoding="utf-8", newline="\n") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    errs = [c for c in cases if "error" in c]
    raised = sum(1 for c in errs if c["raised"])
    print(f"cases={len(cases)} rendered={len(cases) - len(errs)} errors={len(errs)} (raised={raised} other={len(errs) - raised})"
          f" -> {os.path.relpath(out, REPO)}")


if __name__ == "__main__":
    main()
