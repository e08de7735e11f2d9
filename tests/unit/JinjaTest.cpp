// Tests for the Jinja-subset interpreter: jinja2's output, load-time refusals, runtime errors.
#include "server/chat/ChatTemplate.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <string>
#include <thread>
#include <vector>

namespace glm::server {
namespace {

using Json = nlohmann::ordered_json;

struct RenderCase {
  const char *name;
  const char *source;
  const char *variables; // a JSON object
  const char *expected;
};

// Every expected string below is what jinja2 3.1.6 renders for the template and variables, in the
// environment transformers builds for chat templates: ImmutableSandboxedEnvironment with
// trim_blocks and lstrip_blocks, the loopcontrols extension, the {% generation %} tag, and
// transformers' own tojson filter (json.dumps, ensure_ascii=False by default).
const RenderCase kRenderCases[] = {
    {"PlainText", "hello world", "{}", "hello world"},
    {"TrailingNewlineDropped", "line1\n\n", "{}", "line1\n"},
    {"SingleTrailingNewlineDropped", "line1\n", "{}", "line1"},
    {"CrLfNormalized", "line1\r\nline2\r\n", "{}", "line1\nline2"},
    {"LoneCrNormalized", "a\rb", "{}", "a\nb"},
    {"PrintString", "{{ 'v' }}", "{}", "v"},
    {"PrintVariable", "<{{ name }}>", "{\"name\": \"x\"}", "<x>"},
    {"PrintUndefinedIsEmpty", "[{{ missing }}]", "{}", "[]"},
    {"PrintNone", "{{ none }}|{{ None }}|{{ true }}|{{ True }}|{{ false }}|{{ False }}", "{}",
     "None|None|True|True|False|False"},
    {"PrintNumbers",
     "{{ 1 }} {{ -2 }} {{ 1.0 }} {{ 2.50 }} {{ 1e20 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ "
     "0.00001 }} {{ 1.5e-7 }} {{ -0.0 }} {{ 0.1 + 0.2 }} {{ 123456789012345678 }}",
     "{}",
     "1 -2 1.0 2.5 1e+20 1e+16 1000000000000000.0 0.0001 1e-05 1.5e-07 -0.0 0.30000000000000004 "
     "123456789012345678"},
    {"PrintIntegerLiterals",
     "{{ 1_000 }} {{ 0x1f }} {{ 0b101 }} {{ 0o17 }} {{ 1.5e3 }} {{ 2e2 }} {{ 1_0.5 }} {{ 00 }}",
     "{}", "1000 31 5 15 1500.0 200.0 10.5 0"},
    {"PrintList", "{{ [1, 'a', none, true, 1.5, [2], {'k': 'v'}] }}", "{}",
     "[1, 'a', None, True, 1.5, [2], {'k': 'v'}]"},
    {"PrintTuple", "{{ (1, 2) }}|{{ (1,) }}|{{ () }}|{{ {'a': (1, 2)} }}", "{}",
     "(1, 2)|(1,)|()|{'a': (1, 2)}"},
    {"PrintTupleWithoutParens", "{{ 1, 'a' }}", "{}", "(1, 'a')"},
    {"PrintDict", "{{ d }}", "{\"d\": {\"b\": 1, \"a\": [true, null, \"x\"]}}",
     "{'b': 1, 'a': [True, None, 'x']}"},
    {"PrintStringRepr",
     "{{ ['it\\'s', 'a\"b', 'x\\ny', '\\u00e9\\x01', 'both\\'\"', 'tab\\t', 'back\\\\slash'] }}",
     "{}", "[\"it's\", 'a\"b', 'x\\ny', 'é\\x01', 'both\\'\"', 'tab\\t', 'back\\\\slash']"},
    {"StringEscapes",
     "{{ 'a\\tb\\n\\x41\\u00e9\\101\\q\\\\' }}|{{ \"d\\\"q\" }}|{{ '\\U0001F600' }}", "{}",
     "a\tb\nAéA\\q\\|d\"q|😀"},
    {"AdjacentStringsConcatenate", "{{ \"a\" 'b' \"c\" }}", "{}", "abc"},
    {"CommentRemoved", "a{# a comment #}b", "{}", "ab"},
    {"CommentMultiline", "a{# line1\n line2 #}b", "{}", "ab"},
    {"CommentDash", "x {# c -#}   \n  y", "{}", "x y"},
    {"CommentLeftDash", "x\n  {#- c #}\ny", "{}", "xy"},
    {"CommentTrimsNewline", "{{ 1 }}{# c #}\n{{ 2 }}", "{}", "12"},
    {"CommentLstrip", "  {{ 'v' }}  \n  {# c #}\nz", "{}", "  v  \nz"},
    {"TrimBlocksAndLstrip", "a\n  {% if true %}\n    x\n  {% endif %}\nb", "{}", "a\n    x\nb"},
    {"DashBothSides", "a  {%- if true -%}  x  {%- endif -%}  b", "{}", "axb"},
    {"PlusDisablesTrimAndLstrip", "a\n  {%+ if true +%}\n  x\n  {% endif %}\nb", "{}",
     "a\n  \n  x\nb"},
    {"VariableDashRight", "{{ 'a' -}}\n  \n b", "{}", "ab"},
    {"VariableNotLstripped", "{{ 'a' }}\n    {{ 'b' }}", "{}", "a\n    b"},
    {"VariableDashes", "{{- 'x' }}   {{- 'y' -}}   {{ 'z' }}", "{}", "xyz"},
    {"LstripKeepsNonBlank", "a\n\t {% set x = 1 %}\t\nb", "{}", "a\n\t\nb"},
    {"LstripOnlyWhitespaceLine", "  text {% if true %}x{% endif %}", "{}", "  text x"},
    {"LstripAfterVariable", "{{ 'a' }}\n    {% if true %}x{% endif %}", "{}", "a\nx"},
    {"LstripAtTemplateStart", "   {% if true %}x{% endif %}", "{}", "x"},
    {"LstripUnicodeSpace", "　{% if true %}x{% endif %}", "{}", "x"},
    {"DashStripsUnicodeSpace", "x　{%- if true %}y{% endif %}", "{}", "xy"},
    {"TrimBlocksOnlyOneNewline", "{%- if true %}\n\n{% endif %}", "{}", "\n"},
    {"TrimBlocksSpaceBeforeNewline", "{% if true %}  \nx{% endif %}", "{}", "  \nx"},
    {"TrimBlocksCrLf", "{% if true %}\r\nx\r\n{% endif %}\r\n", "{}", "x\n"},
    {"ForLoopLines", "{% for i in [1,2] %}\n  {{ i }}\n{% endfor %}\n", "{}", "  1\n  2\n"},
    {"InlineBlocks", "a {% if true %}b{% endif %} c", "{}", "a b c"},
    {"SetThenBlankLines", "{%- set a = 'q' -%}\n\n   {{ a }}", "{}", "q"},
    {"RawBlock", "a\n{% raw %}{% if %}{{ x }}{% endraw %}\nb", "{}", "a\n{% if %}{{ x }}b"},
    {"RawBlockKeepsNewlineAfterOpen", "{% raw %}\n  {{ x }}\n{% endraw %}\nafter", "{}",
     "\n  {{ x }}\nafter"},
    {"RawBlockDashes", "  {% raw -%}  a {%- endraw %}\nb", "{}", "ab"},
    {"RawBlockLstrip", "a\n   {% raw %} x {% endraw %}   \nb", "{}", "a\n x    \nb"},
    {"BracesInStrings", "{{ '}}' }}{{ '%}' }}{% if '%}' %}ok{% endif %}", "{}", "}}%}ok"},
    {"DictLiteralInOutput", "{{ {'a': {'b': 1}}['a'] }}", "{}", "{'b': 1}"},
    {"NestedBracesEnd", "{{ {'a':1}}}", "{}", "{'a': 1}"},
    {"DataWithBraces", "a { b } {c} {{ '{' }}", "{}", "a { b } {c} {"},
    {"SetSimple", "{% set x = 'a' ~ 'b' %}{{ x }}", "{}", "ab"},
    {"SetTuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}", "{}", "12"},
    {"SetTupleFromList", "{% set a, b = [3, 4] %}{{ a }}{{ b }}", "{}", "34"},
    {"SetBlock", "{% set x %}ab{{ 1 }}{% endset %}[{{ x }}]", "{}", "[ab1]"},
    {"SetBlockFilter", "{% set y | upper | trim %}  cd {% endset %}[{{ y }}]", "{}", "[CD]"},
    {"SetShadowsVariable", "{% set name = 'inner' %}{{ name }}", "{\"name\": \"outer\"}", "inner"},
    {"SetInIfLeaks", "{% set x = 5 %}{% if true %}{% set x = 6 %}{% endif %}{{ x }}", "{}", "6"},
    {"SetInForDoesNotLeak",
     "{% set x = 'out' %}{% for i in [1,2] %}{{ x }}{% set x = i %}{{ x }};{% endfor %}{{ x }}",
     "{}", "out1;out2;out"},
    {"SetInForFreshPerIteration",
     "{% for i in [1,2] %}{% if i == 1 %}{% set x = 'a' %}{% endif %}[{{ x is defined }}]{% endfor "
     "%}",
     "{}", "[True][False]"},
    {"SetInNestedForDoesNotLeak",
     "{% for a in [1] %}{% for b in [2] %}{% set c = 3 %}{% endfor %}{{ c is defined }}{% endfor "
     "%}",
     "{}", "False"},
    {"LoopVariableDoesNotLeak", "{% for i in [1,2] %}{% endfor %}{{ i is defined }}", "{}",
     "False"},
    {"NamespaceCarriesOut",
     "{% set ns = namespace(a=1) %}{% for i in [1,2] %}{% set ns.a = ns.a + i %}{% endfor %}{{ "
     "ns.a }}",
     "{}", "4"},
    {"NamespaceNewAttribute",
     "{% set ns = namespace(a=1) %}{% set ns.b = 2 %}{{ ns.b }}|{{ ns['a'] }}|{{ ns.c }}", "{}",
     "2|1|"},
    {"NamespacePrint", "{% set ns = namespace(a=1, b='x') %}{{ ns }}", "{}",
     "<Namespace {'a': 1, 'b': 'x'}>"},
    {"NamespaceFromDict", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}", "{}",
     "12"},
    {"WithBlock", "{% set a = 5 %}{% with a = 1, b = a %}{{ a }}{{ b }}{% endwith %}{{ a }}", "{}",
     "155"},
    {"ForElseScope",
     "{% for i in [] %}x{% else %}{% set e = 1 %}{{ e }}{% endfor %}[{{ e is defined }}]", "{}",
     "1[False]"},
    {"IfElifElse",
     "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %};{% "
     "endfor %}",
     "{}", "one;two;many;"},
    {"IfTruthiness",
     "{% for v in [0, 1, '', 'a', [], [0], {}, {'a': 1}, none, 0.0, 0.5] %}{{ 'T' if v else 'F' "
     "}}{% endfor %}",
     "{}", "FTFTFTFTFFT"},
    {"IfUndefined", "{% if missing %}t{% else %}f{% endif %}", "{}", "f"},
    {"IfDefinedChecks",
     "{{ x is defined }}{{ x is undefined }}{{ y is defined }}{{ y is not defined }}",
     "{\"y\": null}", "FalseTrueTrueFalse"},
    {"IfMissingKeyDefined",
     "{{ m.reasoning_content is defined }}{{ m.reasoning_content is string }}{{ m.role is defined "
     "}}",
     "{\"m\": {\"role\": \"user\"}}", "FalseFalseTrue"},
    {"ForList", "{% for x in xs %}{{ x }},{% endfor %}", "{\"xs\": [1, \"a\", null]}", "1,a,None,"},
    {"ForDictItems", "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}", "{}",
     "a=1;b=2;"},
    {"ForDictKeys", "{% for k in d %}{{ k }}{% endfor %}", "{\"d\": {\"z\": 1, \"a\": 2}}", "za"},
    {"ForString", "{% for c in 'héllo' %}{{ c }}.{% endfor %}", "{}", "h.é.l.l.o."},
    {"ForUndefinedIsEmpty", "{% for x in missing %}x{% else %}empty{% endfor %}", "{}", "empty"},
    {"ForElse",
     "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in [1] %}x{% else %}empty{% endfor %}",
     "{}", "empty|x"},
    {"LoopVariables",
     "{% for x in 'abc' %}{{ loop.index0 }}{{ loop.index }}{{ loop.revindex }}{{ loop.revindex0 "
     "}}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
     "{}", "0132TrueFalse3;1221FalseFalse3;2310FalseTrue3;"},
    {"LoopPrevNextCycle",
     "{% for i in [1,2,3] %}{{ loop.cycle('a','b') }}{{ loop.previtem }}{{ loop.nextitem }};{% "
     "endfor %}",
     "{}", "a2;b13;a2;"},
    {"LoopDepth", "{% for i in [1] %}{{ loop.depth }}{{ loop.depth0 }}{% endfor %}", "{}", "10"},
    {"ForFilter",
     "{% for i in [1,2,3,4] if i is even %}{{ i }}:{{ loop.index }}/{{ loop.length }}{% if "
     "loop.last %}!{% endif %},{% endfor %}",
     "{}", "2:1/2,4:2/2!,"},
    {"ForFilterElse", "{% for i in [1,3] if i is even %}{{ i }}{% else %}none{% endfor %}", "{}",
     "none"},
    {"ForUnpack", "{% for a, b in [[1,2],[3,4]] %}{{ a }}{{ b }}{% endfor %}", "{}", "1234"},
    {"ForUnpackParens", "{% for (a, b) in [(1,2)] %}{{ a }}-{{ b }}{% endfor %}", "{}", "1-2"},
    {"NestedLoops",
     "{% for a in [1,2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}{{ "
     "loop.index }} {% endfor %}",
     "{}", "1x11y21 2x12y22 "},
    {"BreakContinue",
     "{% for i in [1,2,3] %}{% if i == 2 %}{% continue %}{% endif %}{{ i }}{% endfor %}|{% for i "
     "in [1,2,3] %}{% if i == 2 %}{% break %}{% endif %}{{ i }}{% endfor %}",
     "{}", "13|1"},
    {"ForOverRange",
     "{% for i in range(3) %}{{ i }}{% endfor %}|{{ range(1, 7, 2)|list }}|{{ range(3, 0, -1)|list "
     "}}",
     "{}", "012|[1, 3, 5]|[3, 2, 1]"},
    {"ForMessagesLastUserIndex",
     "{%- set ns = namespace(last=-1) -%}{%- for m in messages %}{%- if m.role == 'user' %}{%- set "
     "ns.last = loop.index0 -%}{%- endif %}{%- endfor %}{{ ns.last }}",
     "{\"messages\": [{\"role\": \"user\"}, {\"role\": \"assistant\"}, {\"role\": \"user\"}, "
     "{\"role\": \"tool\"}]}",
     "2"},
    {"MacroDefaults",
     "{% macro m(a, b=a ~ '!') %}{{ a }}{{ b }}{% endmacro %}{{ m('x') }}|{{ m('x', 'y') }}|{{ "
     "m(b='q', a='p') }}",
     "{}", "xx!|xy|pq"},
    {"MacroMissingArgIsUndefined", "{% macro m(a) %}{{ a is defined }}{% endmacro %}{{ m() }}",
     "{}", "False"},
    {"MacroVarargsKwargs",
     "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, c=4) }}", "{}",
     "1(2, 3){'c': 4}"},
    {"MacroReturnsString",
     "{% macro m() %} x {% endmacro %}{% set s = m() %}[{{ s.strip() }}]{{ s is string }}", "{}",
     "[x]True"},
    {"MacroSeesLateGlobals",
     "{% macro m() %}{{ x }}{% endmacro %}{% set x = 1 %}[{{ m() }}]{% set x = 2 %}[{{ m() }}]",
     "{}", "[1][2]"},
    {"MacroDoesNotSeeLoopVariables",
     "{% macro m() %}{{ x }}{% endmacro %}{% for x in [1] %}[{{ m() }}]{% endfor %}", "{}", "[]"},
    {"MacroSetIsLocal",
     "{% macro m() %}{% set y = 1 %}{{ y }}{% endmacro %}{{ m() }}{{ y is defined }}", "{}",
     "1False"},
    {"MacroDefinedInIf", "{% if true %}{% macro m() %}x{% endmacro %}{% endif %}[{{ m() }}]", "{}",
     "[x]"},
    {"MacroInLoopDoesNotLeak",
     "{% for i in [1] %}{% macro m() %}x{% endmacro %}{% endfor %}[{{ m is defined }}]", "{}",
     "[False]"},
    {"MacroRecursion",
     "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}", "{}",
     "321"},
    {"MacroWhitespace",
     "{% macro tool_response(text) -%}\n{{- '<r>' + text + '</r>' -}}\n{%- endmacro %}\n[{{ "
     "tool_response('x') }}]",
     "{}", "[<r>x</r>]"},
    {"MacroVisibleText",
     "{%- macro visible_text(content) -%}\n    {%- if content is string -%}\n        {{- content "
     "-}}\n    {%- elif content is iterable and content is not mapping -%}\n        {%- for item "
     "in content -%}\n            {%- if item is mapping and item.type == 'text' -%}\n             "
     "   {{- item.text -}}\n            {%- elif item is string -%}\n                {{- item "
     "-}}\n            {%- endif -%}\n        {%- endfor -%}\n    {%- elif content is not none "
     "-%}\n        {{- content -}}\n    {%- endif -%}\n{%- endmacro -%}\n[{{ visible_text(a) "
     "}}][{{ visible_text(b) }}][{{ visible_text(c) }}][{{ visible_text(d) }}]",
     "{\"a\": \"s\", \"b\": [{\"type\": \"text\", \"text\": \"t1\"}, {\"type\": \"image_url\"}, "
     "\"t2\"], \"c\": null, \"d\": 5}",
     "[s][t1t2][][5]"},
    {"FilterTojson",
     "{{ 'x'|tojson }}|{{ {'a':[1,2.0,none,true,'é\"\\n']}|tojson }}|{{ "
     "{'a':'é'}|tojson(ensure_ascii=True) }}",
     "{}", "\"x\"|{\"a\": [1, 2.0, null, true, \"é\\\"\\n\"]}|{\"a\": \"\\u00e9\"}"},
    {"FilterTojsonIndent",
     "{{ {'a':[1,{'b':2}], 'c': {}, 'd': []}|tojson(indent=2) }}|{{ [] | tojson(indent=2) }}|{{ "
     "[1]|tojson(indent=0) }}",
     "{}",
     "{\n  \"a\": [\n    1,\n    {\n      \"b\": 2\n    }\n  ],\n  \"c\": {},\n  \"d\": "
     "[]\n}|[]|[\n1\n]"},
    {"FilterTojsonOptions",
     "{{ {'b':1,'a':2}|tojson(sort_keys=true) }}|{{ [1,2]|tojson(separators=(',',':')) }}|{{ {'a': "
     "1}|tojson(indent='\\t') }}",
     "{}", "{\"a\": 2, \"b\": 1}|[1,2]|{\n\t\"a\": 1\n}"},
    {"FilterTojsonEscapes",
     "{{ 'a\\u00e9\\U0001F600\\x7f'|tojson(ensure_ascii=true) }}|{{ "
     "'\\x7f\\x00\\x1f\\b\\f\\r\\t'|tojson }}|{{ '</script>'|tojson }}",
     "{}", "\"a\\u00e9\\ud83d\\ude00\\u007f\"|\"\177\\u0000\\u001f\\b\\f\\r\\t\"|\"</script>\""},
    {"FilterTojsonKeyOrder", "{{ tool|tojson }}",
     "{\"tool\": {\"name\": \"f\", \"description\": \"d\", \"parameters\": {\"type\": \"object\", "
     "\"properties\": {\"z\": {\"type\": \"string\"}, \"a\": {\"type\": \"integer\"}}}}}",
     "{\"name\": \"f\", \"description\": \"d\", \"parameters\": {\"type\": \"object\", "
     "\"properties\": {\"z\": {\"type\": \"string\"}, \"a\": {\"type\": \"integer\"}}}}"},
    {"FilterTojsonNumbers", "{{ [1, 1.0, 1e20, 1.5e-7, -0.0, 3.14159]|tojson }}", "{}",
     "[1, 1.0, 1e+20, 1.5e-07, -0.0, 3.14159]"},
    {"FilterTojsonUnicodeVar", "{{ s|tojson }}|{{ s|tojson(ensure_ascii=true) }}",
     "{\"s\": \"日本語 🙂 naïve — ½\"}",
     "\"日本語 🙂 naïve — ½\"|\"\\u65e5\\u672c\\u8a9e \\ud83d\\ude42 na\\u00efve \\u2014 "
     "\\u00bd\""},
    {"FilterCase",
     "{{ 'hello world'|capitalize }}|{{ 'HELLO'|capitalize }}|{{ 'a B'|upper }}|{{ 'A B'|lower "
     "}}|{{ 'hello-wORLD x1y (ab'|title }}|{{ 'é'|upper }}{{ 'Σ'|lower }}",
     "{}", "Hello world|Hello|A B|a b|Hello-World X1y (Ab|Éσ"},
    {"FilterTrim", "[{{ '  a  '|trim }}][{{ 'xax'|trim('x') }}][{{ '\\n\\t a \\u3000'|trim }}]",
     "{}", "[a][a][a]"},
    {"FilterLength",
     "{{ 'héllo'|length }}{{ [1,2]|length }}{{ {'a':1}|length }}{{ missing|length }}{{ 'ab'|count "
     "}}",
     "{}", "52102"},
    {"FilterString",
     "{{ 5|string }}|{{ none|string }}|{{ [1]|string }}|{{ 1.0|string }}|{{ missing|string }}|",
     "{}", "5|None|[1]|1.0||"},
    {"FilterDefault",
     "{{ x|default('d') }}|{{ ''|default('d') }}|{{ ''|default('d', true) }}|{{ none|default('d') "
     "}}|{{ x|d('e') }}|{{ x|default }}|",
     "{}", "d||d|None|e||"},
    {"FilterJoin",
     "{{ ['a','b']|join }}|{{ [1,2]|join(', ') }}|{{ [{'x':1},{'x':2}]|join('-', attribute='x') "
     "}}|{{ 'abc'|join('.') }}",
     "{}", "ab|1, 2|1-2|a.b.c"},
    {"FilterFirstLast",
     "{{ 'abc'|first }}|{{ [1,2]|last }}|{{ []|first }}|{{ 'abc'|last }}|{{ {'a':1,'b':2}|first }}",
     "{}", "a|2||c|a"},
    {"FilterList", "{{ [1,2]|list }}|{{ 'ab'|list }}|{{ {'a':1}|list }}|{{ missing|list }}", "{}",
     "[1, 2]|['a', 'b']|['a']|[]"},
    {"FilterItems",
     "{{ {'a':1, 'b': [2]}|items|list }}|{% for k, v in {'x': 1}|items %}{{ k }}{{ v }}{% endfor "
     "%}|{{ missing|items|list }}",
     "{}", "[('a', 1), ('b', [2])]|x1|[]"},
    {"FilterReplace",
     "{{ 'aaa'|replace('a','b') }}|{{ 'aaa'|replace('a','b',2) }}|{{ 'ab'|replace('','-') }}", "{}",
     "bbb|bba|-a-b-"},
    {"FilterIntFloat",
     "{{ '3.7'|int }}|{{ 'x'|int }}|{{ '0x1A'|int(0, 16) }}|{{ '0x1A'|int(base=0) }}|{{ 3.9|int "
     "}}|{{ -3.9|int }}|{{ ' 12 '|int }}|{{ '1_000'|int }}|{{ '3.5'|float }}|{{ 'a'|float }}|{{ "
     "5|float }}|{{ true|int }}|{{ none|int(7) }}|{{ '1e3'|float }}|{{ 'x'|float(2.5) }}",
     "{}", "3|0|26|26|3|-3|12|1000|3.5|0.0|5.0|1|7|1000.0|2.5"},
    {"FilterRound",
     "{{ 2.5|round }}|{{ 3.5|round }}|{{ 2.675|round(2) }}|{{ 2.5|round(0,'floor') }}|{{ 7|round "
     "}}|{{ -2.5|round }}|{{ 42.55|round(1, 'floor') }}|{{ 42.55|round(1, 'ceil') }}|{{ "
     "1234.5|round(-2) }}",
     "{}", "2.0|4.0|2.67|2.0|7|-2.0|42.5|42.6|1200.0"},
    {"FilterSafeEscape", "{{ 'a<b>&\"\\''|e }}|{{ 'a<b'|escape }}|{{ 'a<b'|safe }}|{{ 1|safe }}",
     "{}", "a&lt;b&gt;&amp;&#34;&#39;|a&lt;b|a<b|1"},
    {"FilterIndent",
     "{{ 'x\\ny'|indent(2) }}|{{ 'x\\ny'|indent(2, true) }}|{{ 'x\\n\\ny\\n'|indent }}|{{ "
     "'x\\n\\ny'|indent(blank=true) }}|{{ 'a\\nb'|indent('> ') }}",
     "{}", "x\n  y|  x\n  y|x\n\n    y\n|x\n    \n    y|a\n> b"},
    {"FilterSortUnique",
     "{{ [3,1,2]|sort }}|{{ [3,1,2]|sort(reverse=true) }}|{{ ['b','A','a']|sort }}|{{ "
     "['b','A','a']|sort(case_sensitive=true) }}|{{ ['b','A','a','B']|unique|list }}|{{ "
     "[{'a':'B'},{'a':'a'}]|sort(attribute='a')|map(attribute='a')|list }}",
     "{}", "[1, 2, 3]|[3, 2, 1]|['A', 'a', 'b']|['A', 'a', 'b']|['b', 'A']|['a', 'B']"},
    {"FilterSortMultiAttribute",
     "{{ people|sort(attribute='age,name')|map(attribute='name')|join(',') }}",
     "{\"people\": [{\"name\": \"b\", \"age\": 2}, {\"name\": \"a\", \"age\": 2}, {\"name\": "
     "\"c\", \"age\": 1}]}",
     "c,a,b"},
    {"FilterReverse", "{{ [1,2]|reverse|list }}|{{ 'abc'|reverse }}|{{ 'héllo'|reverse }}", "{}",
     "[2, 1]|cba|olléh"},
    {"FilterNumbers",
     "{{ -3|abs }}|{{ -2.5|abs }}|{{ [1.5,2]|sum }}|{{ [1,2]|sum(start=10) }}|{{ "
     "[{'n':1},{'n':2}]|sum(attribute='n') }}|{{ [1,5,2]|max }}|{{ [1,5,2]|min }}|{{ ['b','A']|max "
     "}}|{{ []|max }}|",
     "{}", "3|2.5|3.5|13|3|5|1|b||"},
    {"FilterMapSelect",
     "{{ ['a','b']|map('upper')|join }}|{{ [' a ']|map('trim')|list }}|{{ ['x']|map('replace', "
     "'x', 'y')|list }}|{{ [{'a':1},{}]|map(attribute='a', default=0)|list }}",
     "{}", "AB|['a']|['y']|[1, 0]"},
    {"FilterSelectReject",
     "{{ [none, 1, 0, 'a']|select|list }}|{{ [1,2,3]|select('odd')|list }}|{{ "
     "[1,2,3]|reject('odd')|list }}|{{ [1,2,3]|select('gt', 1)|list }}|{{ "
     "[1,2,3]|select('equalto', 2)|list }}",
     "{}", "[1, 'a']|[1, 3]|[2]|[2, 3]|[2]"},
    {"FilterSelectattr",
     "{{ msgs|selectattr('role', 'equalto', 'system')|list|length }}|{{ msgs|rejectattr('role', "
     "'eq', 'system')|map(attribute='content')|join(',') }}|{{ "
     "msgs|selectattr('tool_calls')|list|length }}|{{ msgs|selectattr('tool_calls', "
     "'defined')|list|length }}",
     "{\"msgs\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": "
     "\"u\"}, {\"role\": \"assistant\", \"content\": \"a\", \"tool_calls\": []}]}",
     "1|u,a|0|1"},
    {"FilterDictsort",
     "{{ {'b':1,'a':2}|dictsort }}|{{ {'b':1,'a':2}|dictsort(by='value') }}|{{ "
     "{'b':1,'A':2}|dictsort(reverse=true) }}",
     "{}", "[('a', 2), ('b', 1)]|[('b', 1), ('a', 2)]|[('b', 1), ('A', 2)]"},
    {"FilterWordcount", "{{ 'hello world, foo_bar 42'|wordcount }}", "{}", "4"},
    {"FilterAttr", "{{ {'k':1}|attr('k') }}|{{ ns|attr('a') }}", "{\"ns\": null}", "|"},
    {"FilterBlock",
     "{% filter upper %}ab{{ 'c' }}{% endfilter %}|{% filter trim|upper %}  x  {% endfilter %}",
     "{}", "ABC|X"},
    {"FilterChainPrecedence",
     "{{ -3|abs }}|{{ 'a' ~ 'b'|upper }}|{{ 1 + '2'|int }}|{{ [3, 1]|sort|first }}", "{}",
     "3|aB|3|1"},
    {"Tests1",
     "{{ 1 is number }}{{ 1.5 is number }}{{ true is number }}{{ true is boolean }}{{ 1 is integer "
     "}}{{ true is integer }}{{ 1.0 is float }}{{ 'a' is string }}{{ none is string }}",
     "{}", "TrueTrueTrueTrueTrueFalseTrueTrueFalse"},
    {"Tests2",
     "{{ [1] is sequence }}{{ 'a' is sequence }}{{ {} is sequence }}{{ 1 is sequence }}{{ x is "
     "sequence }}{{ {} is mapping }}{{ [] is mapping }}{{ 'a' is iterable }}{{ 1 is iterable }}{{ "
     "x is iterable }}",
     "{}", "TrueTrueTrueFalseTrueTrueFalseTrueFalseTrue"},
    {"Tests3",
     "{{ 3 is odd }}{{ 4 is even }}{{ 6 is divisibleby 3 }}{{ 6 is divisibleby(4) }}{{ 1 is eq 1 "
     "}}{{ 1 is equalto 1 }}{{ 1 is ne 2 }}{{ 1 is lt 2 }}{{ 2 is le 2 }}{{ 3 is gt 2 }}{{ 3 is ge "
     "4 }}{{ 1 is greaterthan 0 }}{{ 1 is lessthan 0 }}",
     "{}", "TrueTrueTrueFalseTrueTrueTrueTrueTrueTrueFalseTrueFalse"},
    {"Tests4",
     "{{ none is none }}{{ x is none }}{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 0 "
     "is false }}{{ x is undefined }}{{ 'a' is in 'abc' }}{{ 2 is in [1, 2] }}{{ 'ab' is lower "
     "}}{{ 'AB' is upper }}{{ '12' is lower }}",
     "{}", "TrueFalseTrueFalseTrueFalseTrueTrueTrueTrueTrueFalse"},
    {"Tests5",
     "{{ range is callable }}{{ 'a' is callable }}{{ none is sameas none }}{{ 'upper' is filter "
     "}}{{ 'nope' is filter }}{{ 'odd' is test }}{{ m is mapping }}",
     "{\"m\": {\"a\": 1}}", "TrueFalseTrueTrueFalseTrueTrue"},
    {"TestIsNot",
     "{{ 1 is not string }}{{ 'a' is not string }}{{ x is not defined }}{{ v | tojson if v is not "
     "string else v }}",
     "{\"v\": [1, \"a\"]}", "TrueFalseTrue[1, \"a\"]"},
    {"Arithmetic",
     "{{ 10/3 }} {{ 4/2 }} {{ 7//2 }} {{ -7//2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2**10 }} {{ 2**-1 "
     "}} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 "
     "** 2 }}",
     "{}", "3.3333333333333335 2.0 3 -4 2 -2 1024 0.5 3.0 0.5 7 9 64 4"},
    {"ArithmeticMixed",
     "{{ true + 1 }} {{ 1 + 1.5 }} {{ 3 - 0.5 }} {{ 'ab' + 'cd' }} {{ [1] + [2] }} {{ (1,) + (2,) "
     "}} {{ 'abc' * 2 }} {{ [1] * 3 }} {{ 2 * 'ab' }} {{ 'a' * 0 }}|{{ -(1) }} {{ +1 }} {{ - -1 }}",
     "{}", "2 2.5 2.5 abcd [1, 2] (1, 2) abcabc [1, 1, 1] abab |-1 1 1"},
    {"Concat", "{{ 'a' ~ 1 ~ none ~ true ~ 1.0 ~ [1] ~ missing }}", "{}", "a1NoneTrue1.0[1]"},
    {"Comparisons",
     "{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1,2] < [1,3] }} {{ none == none }} {{ 1 "
     "!= 2 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' == 'a' }} {{ [1, [2]] == [1, [2]] }} {{ {'a': "
     "1} == {'a': 1} }} {{ (1, 2) == [1, 2] }} {{ x == none }} {{ x == y }} {{ 2 >= 2.0 }}",
     "{}", "True True True True True True True False True True True False False True True"},
    {"InOperator",
     "{{ 'b' in 'abc' }}{{ 'k' in {'k':1} }}{{ 2 in [1,2] }}{{ 3 not in [1,2] }}{{ not 3 in [1, 2] "
     "}}{{ 'a' in missing }}{{ missing in ['a'] }}{{ '</think>' in content }}",
     "{\"content\": \"x</think>y\"}", "TrueTrueTrueTrueTrueFalseFalseTrue"},
    {"LogicOperators",
     "{{ x or 'dflt' }}|{{ 'v' and 'w' }}|{{ 0 and 'w' }}|{{ '' or [] }}|{{ not '' }}|{{ not 1 "
     "}}|{{ true and not false }}|{{ 1 if none else 2 }}|{{ 'a' is string and 'b' is string }}",
     "{}", "dflt|w|0|[]|True|False|True|2|True"},
    {"Precedence",
     "{{ not 1 == 2 }}|{{ 'a' ~ (1 + 2) }}|{{ 2 * 3 ~ 4 }}|{{ 1 ~ 2 * 3 }}|{{ 2 ** 2 ~ 1 }}|{{ not "
     "true or true }}|{{ true or false and false }}",
     "{}", "True|a3|64|16|41|True|True"},
    {"Ternary",
     "{{ 'a' if true else 'b' }}|{{ 'a' if false else 'b' }}|{{ 'a' if false }}|{{ ('a' if false) "
     "is defined }}|{{ 'x' if 0 else 'y' if 1 else 'z' }}",
     "{}", "a|b||False|y"},
    {"Subscripts",
     "{{ xs[0] }}{{ xs[-1] }}{{ xs[5] }}|{{ d['k'] }}{{ d.k }}{{ d['missing'] }}|{{ 'héllo'[1] "
     "}}|{{ xs.0 }}|{{ nested.a.b[1] }}|{{ d['items'] }}",
     "{\"xs\": [1, 2, 3], \"d\": {\"k\": \"v\", \"items\": \"i\"}, \"nested\": {\"a\": {\"b\": [5, "
     "6]}}}",
     "13|vv|é|1|6|i"},
    {"Slices",
     "{{ 'abc'[::-1] }} {{ 'abc'[1:] }} {{ [1,2,3][1:] }} {{ (1,2,3)[1:] }} {{ [1,2,3][::2] }} {{ "
     "'hello'[1:-1] }} {{ [1,2,3][:-1] }} {{ [1,2,3][-2:] }} {{ [1,2,3][5:] }} {{ 'abcdef'[4:1:-1] "
     "}} {{ [1,2,3][::-2] }} {{ [1,2,3][none:2] }}",
     "{}", "cba bc [2, 3] (2, 3) [1, 3] ell [1, 2] [2, 3] [] edc [3, 1] [1, 2]"},
    {"AttributeFallsBackToItem",
     "{{ m.role }}|{{ m['role'] }}|{{ m.missing }}|{{ m.get('role') }}|{{ m.get('x', 'dflt') }}|{{ "
     "m.get('x') }}|{{ none.x }}|{{ [1][3] }}",
     "{\"m\": {\"role\": \"user\"}}", "user|user||user|dflt|None||"},
    {"DictMethods",
     "{{ d.keys() }}|{{ d.values() }}|{{ d.items() }}|{{ d.keys()|list }}|{{ d.copy() }}|{{ "
     "d.items()|length }}",
     "{\"d\": {\"a\": 1, \"b\": [2]}}",
     "dict_keys(['a', 'b'])|dict_values([1, [2]])|dict_items([('a', 1), ('b', [2])])|['a', "
     "'b']|{'a': 1, 'b': [2]}|2"},
    {"ListAndDictLiterals",
     "{{ [1, 2,] }}|{{ {'a': 1, 'b': 2,} }}|{{ [] }}|{{ {} }}|{{ {'a': [1, {'b': none}]} }}|{{ "
     "['low', 'high'] }}",
     "{}", "[1, 2]|{'a': 1, 'b': 2}|[]|{}|{'a': [1, {'b': None}]}|['low', 'high']"},
    {"StringSplit",
     "{{ 'a b  c'.split() }}|{{ 'a,b,,c'.split(',') }}|{{ 'a,b,c'.split(',', 1) }}|{{ '  a  b  "
     "'.split(none, 1) }}|{{ 'a.b.c'.rsplit('.', 1) }}|{{ '  a  b  '.rsplit(none, 1) }}|{{ "
     "''.split() }}|{{ ''.split(',') }}",
     "{}",
     "['a', 'b', 'c']|['a', 'b', '', 'c']|['a', 'b,c']|['a', 'b  ']|['a.b', 'c']|['  a', "
     "'b']|[]|['']"},
    {"StringStrip",
     "[{{ '  x '.strip() }}][{{ 'xxaxx'.strip('x') }}][{{ '  x '.lstrip() }}][{{ '  x '.rstrip() "
     "}}][{{ 'abcba'.lstrip('ab') }}][{{ '\\n\\u3000x\\u00a0'.strip() }}]",
     "{}", "[x][a][x ][  x][cba][x]"},
    {"StringPredicates",
     "{{ 'abc'.startswith('a') }}{{ 'abc'.startswith('b') }}{{ 'abc'.endswith(('x','c')) }}{{ "
     "'abc'.endswith('') }}{{ '123'.isdigit() }}{{ 'ab'.isalpha() }}{{ ' '.isspace() }}{{ "
     "'ab'.islower() }}{{ 'AB'.isupper() }}{{ ''.isdigit() }}",
     "{}", "TrueFalseTrueTrueTrueTrueTrueTrueTrueFalse"},
    {"StringMethods",
     "{{ 'abc'.find('c') }}{{ 'abc'.find('z') }}{{ 'aXb'.replace('X','-') }}{{ ','.join(['a','b']) "
     "}}{{ 'ab'.upper() }}{{ 'AB'.lower() }}{{ 'hello world'.title() }}{{ 'hello-wORLD "
     "x1y'.title() }}{{ 'hELLO'.capitalize() }}{{ 'abcb'.count('b') }}{{ 'abcb'.rfind('b') }}{{ "
     "'héllo'.find('l') }}{{ 'abc'.index('b') }}",
     "{}", "2-1a-ba,bABabHello WorldHello-World X1YHello2321"},
    {"StringSplitlines",
     "{{ 'a\\r\\nb\\rc\\x0bd\\n'.splitlines() }}|{{ 'a\\nb'.splitlines(true) }}", "{}",
     "['a', 'b', 'c', 'd']|['a\\n', 'b']"},
    {"StringRemovePrefix",
     "{{ 'prefix-x'.removeprefix('prefix-') }}|{{ 'x.json'.removesuffix('.json') }}|{{ "
     "'x'.removeprefix('y') }}",
     "{}", "x|x|x"},
    {"ThinkSplit",
     "{% set content = c %}{% set r = content.split('</think>')[0].split('<think>')[-1] %}{% set "
     "content = content.split('</think>')[-1] %}[{{ r }}][{{ content.strip() }}]",
     "{\"c\": \"<think>greet back</think>  Hello there!  \"}", "[greet back][Hello there!]"},
    {"DictGlobal", "{{ dict(a=1, b=2) }}|{{ dict({'x': 1}) }}", "{}", "{'a': 1, 'b': 2}|{'x': 1}"},
    {"GenerationTag", "a{% generation %}b{{ 'c' }}{% endgeneration %}d", "{}", "abcd"},
    {"GenerationTagScope", "{% generation %}{% set g = 1 %}{% endgeneration %}{{ g is defined }}",
     "{}", "False"},
    {"UnknownFilterInIfIsLazy",
     "{% if false %}{{ x|nosuchfilter }}{% endif %}ok{{ 'y' if true else z|nosuchfilter }}", "{}",
     "oky"},
    {"UnknownTestInIfIsLazy", "{% if false and x is nosuchtest %}no{% endif %}ok", "{}", "ok"},
};

class JinjaRenderTest : public ::testing::TestWithParam<RenderCase> {};

TEST_P(JinjaRenderTest, MatchesJinja2) {
  const RenderCase &c = GetParam();
  Expected<ChatTemplate> tmpl = ChatTemplate::parse(c.source, "case.jinja");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().toString();
  Expected<std::string> out = tmpl->render(Json::parse(c.variables));
  ASSERT_TRUE(out.ok()) << out.status().toString();
  EXPECT_EQ(*out, c.expected);
}

INSTANTIATE_TEST_SUITE_P(Jinja2, JinjaRenderTest, ::testing::ValuesIn(kRenderCases),
                         [](const ::testing::TestParamInfo<RenderCase> &info) {
                           return std::string(info.param.name);
                         });

struct ErrorCase {
  const char *name;
  const char *source;
  StatusCode code;
  const char *message; // the whole Status message
};

/// Templates refused when they load. jinja2 refuses the FormatError ones too; the Unimplemented
/// ones are jinja2 features this interpreter does not have.
const ErrorCase kLoadErrors[] = {
    {"IncludeTag", "{% include 'x' %}", StatusCode::Unimplemented,
     "case.jinja:1:4: unsupported tag 'include'"},
    {"ImportTagOnLine3", "a\nb\n  {% import 'x' as y %}", StatusCode::Unimplemented,
     "case.jinja:3:6: unsupported tag 'import'"},
    {"CallTag", "{% call m() %}{% endcall %}", StatusCode::Unimplemented,
     "case.jinja:1:4: unsupported tag 'call'"},
    {"ExtendsTag", "{% extends 'base' %}", StatusCode::Unimplemented,
     "case.jinja:1:4: unsupported tag 'extends'"},
    {"UnsupportedFilter", "{{ x|batch(2) }}", StatusCode::Unimplemented,
     "case.jinja:1:6: unsupported filter 'batch'"},
    {"UnsupportedFilterInIf", "{% if x %}\n  {{ x | format(1) }}\n{% endif %}",
     StatusCode::Unimplemented, "case.jinja:2:10: unsupported filter 'format'"},
    {"RecursiveLoop", "{% for x in xs recursive %}{% endfor %}", StatusCode::Unimplemented,
     "case.jinja:1:16: unsupported recursive for loop"},
    {"ArgumentUnpacking", "{{ f(*args) }}", StatusCode::Unimplemented,
     "case.jinja:1:6: unsupported argument unpacking in a call"},
    {"NestedTupleTarget", "{% for (a, (b, c)) in x %}{% endfor %}", StatusCode::Unimplemented,
     "case.jinja:1:20: unsupported nested tuple in an assignment target"},
    {"UnknownFilter", "{{ x|nosuchfilter }}", StatusCode::FormatError,
     "case.jinja:1:6: no filter named 'nosuchfilter'"},
    {"UnknownTest", "{{ x is nosuchtest }}", StatusCode::FormatError,
     "case.jinja:1:9: no test named 'nosuchtest'"},
    {"UnknownFilterInLoopInsideIf", "{% if x %}{% for i in x %}{{ i|nope }}{% endfor %}{% endif %}",
     StatusCode::FormatError, "case.jinja:1:32: no filter named 'nope'"},
    {"UnclosedIf", "{% if x %}", StatusCode::FormatError,
     "case.jinja:1:4: 'if' is never closed: expected 'elif' or 'else' or 'endif' before the end "
     "of the template"},
    {"UnclosedForElse", "\n{% for x in y %}{% else %}", StatusCode::FormatError,
     "case.jinja:2:4: 'for' is never closed: expected 'endfor' before the end of the template"},
    {"StrayEndif", "{% endif %}", StatusCode::FormatError,
     "case.jinja:1:4: unexpected tag 'endif'"},
    {"UnknownTag", "{% foo %}", StatusCode::FormatError, "case.jinja:1:4: unknown tag 'foo'"},
    {"UnterminatedString", "{{ 'abc }}", StatusCode::FormatError,
     "case.jinja:1:4: unterminated string literal"},
    {"UnclosedComment", "ab{# unclosed", StatusCode::FormatError,
     "case.jinja:1:3: missing end of comment tag"},
    {"UnclosedPrint", "{{ x", StatusCode::FormatError,
     "case.jinja:1:1: tag '{{' is never closed with '}}'"},
    {"BreakOutsideLoop", "{% break %}", StatusCode::FormatError,
     "case.jinja:1:4: 'break' outside of a for loop"},
    {"BreakInMacroInLoop", "{% for x in y %}{% macro m() %}{% break %}{% endmacro %}{% endfor %}",
     StatusCode::FormatError, "case.jinja:1:35: 'break' outside of a for loop"},
    {"DefaultBeforeNonDefault", "{% macro m(a=1, b) %}{% endmacro %}", StatusCode::FormatError,
     "case.jinja:1:17: non-default argument follows default argument"},
    {"UnbalancedParen", "{{ (1 }}", StatusCode::FormatError,
     "case.jinja:1:7: unexpected '}', expected ')'"},
    {"TwoExpressions", "{{ 1 2 }}", StatusCode::FormatError,
     "case.jinja:1:6: expected '}}', got integer"},
    {"EmptyPrint", "{{ }}", StatusCode::FormatError,
     "case.jinja:1:4: expected an expression, got end of print statement"},
    {"EmptySet", "{% set %}", StatusCode::FormatError,
     "case.jinja:1:8: expected an expression, got end of statement block"},
    {"BadCharacter", "{{ a ? b }}", StatusCode::FormatError,
     "case.jinja:1:6: unexpected character '?'"},
};

class JinjaLoadErrorTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(JinjaLoadErrorTest, FailsAtLoad) {
  const ErrorCase &c = GetParam();
  Expected<ChatTemplate> tmpl = ChatTemplate::parse(c.source, "case.jinja");
  ASSERT_FALSE(tmpl.ok());
  EXPECT_EQ(tmpl.status().code(), c.code) << tmpl.status().toString();
  EXPECT_EQ(tmpl.status().message(), c.message);
}

INSTANTIATE_TEST_SUITE_P(Jinja, JinjaLoadErrorTest, ::testing::ValuesIn(kLoadErrors),
                         [](const ::testing::TestParamInfo<ErrorCase> &info) {
                           return std::string(info.param.name);
                         });

/// Templates that load but fail when rendered (jinja2 raises at the same point).
const ErrorCase kRenderErrors[] = {
    {"RaiseException", "{% if true %}\n  {{ raise_exception('Roles must alternate') }}{% endif %}",
     StatusCode::InvalidArgument, "case.jinja:2:6: Roles must alternate"},
    {"DivisionByZero", "{{ 1/0 }}", StatusCode::InvalidArgument,
     "case.jinja:1:5: division by zero"},
    {"ForOverNone", "{% for x in none %}{% endfor %}", StatusCode::InvalidArgument,
     "case.jinja:1:13: 'NoneType' object is not iterable"},
    {"TojsonUndefined", "{{ x|tojson }}", StatusCode::InvalidArgument,
     "case.jinja:1:6: Object of type Undefined is not JSON serializable"},
    {"AttributeOfUndefined", "{{ x.y }}", StatusCode::InvalidArgument,
     "case.jinja:1:4: 'x' is undefined"},
    {"DefinedTestOnAttributeOfUndefined", "{{ x.y is defined }}", StatusCode::InvalidArgument,
     "case.jinja:1:4: 'x' is undefined"},
    {"AttributeOfMissingAttribute", "{{ ({'a':1}['b']).c }}", StatusCode::InvalidArgument,
     "case.jinja:1:5: 'dict object' has no attribute 'b'"},
    {"ArithmeticOnUndefined", "{{ x + 1 }}", StatusCode::InvalidArgument,
     "case.jinja:1:6: 'x' is undefined"},
    {"StrPlusInt", "{{ 'a' + 1 }}", StatusCode::InvalidArgument,
     "case.jinja:1:8: can only concatenate str (not \"int\") to str"},
    {"IntPlusStr", "{{ 1 + '2' }}", StatusCode::InvalidArgument,
     "case.jinja:1:6: unsupported operand type(s) for +: 'int' and 'str'"},
    {"ConcatThenAdd", "{{ 1 ~ 2 + 3 }}", StatusCode::InvalidArgument,
     "case.jinja:1:10: can only concatenate str (not \"int\") to str"},
    {"NamespaceAssignOnString", "{% set s = 'x' %}{% set s.b = 2 %}", StatusCode::InvalidArgument,
     "case.jinja:1:25: cannot assign attribute on non-namespace object"},
    {"TooManyValuesToUnpack", "{% for a, b in [[1,2,3]] %}{% endfor %}",
     StatusCode::InvalidArgument, "case.jinja:1:8: too many values to unpack (expected 2)"},
    {"MacroTooManyArguments", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}",
     StatusCode::InvalidArgument, "case.jinja:1:34: macro 'm' takes not more than 1 argument(s)"},
    {"MacroUnknownKeyword", "{% macro m(a) %}{% endmacro %}{{ m(1, c=2) }}",
     StatusCode::InvalidArgument, "case.jinja:1:34: macro 'm' takes no keyword argument 'c'"},
    {"MacroRunawayRecursion", "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
     StatusCode::InvalidArgument,
     "case.jinja:1:19: macro calls nest deeper than 256 levels (runaway recursion in 'f'?)"},
    {"ListAppendIsUnsafe", "{{ [].append(1) }}", StatusCode::InvalidArgument,
     "case.jinja:1:4: access to attribute 'append' of 'list' object is unsafe."},
    {"DictUpdateIsUnsafe", "{{ {}.update({}) }}", StatusCode::InvalidArgument,
     "case.jinja:1:4: access to attribute 'update' of 'dict' object is unsafe."},
    {"JoinNonStrings", "{{ ' '.join([1]) }}", StatusCode::InvalidArgument,
     "case.jinja:1:4: sequence item 0: expected str instance, int found"},
    {"RangeTooBig", "{{ range(100001)|length }}", StatusCode::InvalidArgument,
     "case.jinja:1:4: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000)."},
    {"OrderStrAndInt", "{{ 'a' < 1 }}", StatusCode::InvalidArgument,
     "case.jinja:1:10: '<' not supported between instances of 'str' and 'int'"},
    {"OrderUndefined", "{{ x < 1 }}", StatusCode::InvalidArgument,
     "case.jinja:1:8: 'x' is undefined"},
    {"InInt", "{{ 'a' in 1 }}", StatusCode::InvalidArgument,
     "case.jinja:1:11: argument of type 'int' is not iterable"},
    {"IntInString", "{{ 1 in 'a' }}", StatusCode::InvalidArgument,
     "case.jinja:1:9: 'in <string>' requires string as left operand, not int"},
    {"UnknownFilterReached", "{% if true %}{{ x|nosuchfilter }}{% endif %}",
     StatusCode::Unimplemented, "case.jinja:1:19: no filter named 'nosuchfilter'"},
    {"CallUndefined", "{{ x() }}", StatusCode::InvalidArgument, "case.jinja:1:4: 'x' is undefined"},
    {"CallInt", "{{ 1() }}", StatusCode::InvalidArgument,
     "case.jinja:1:4: 'int' object is not callable"},
    {"NegateString", "{{ -'a' }}", StatusCode::InvalidArgument,
     "case.jinja:1:4: bad operand type for unary -: 'str'"},
    {"IndexNotFound", "{{ 'ab'.index('z') }}", StatusCode::InvalidArgument,
     "case.jinja:1:4: substring not found"},
    {"StringFormatting", "{{ '%s' % 1 }}", StatusCode::Unimplemented,
     "case.jinja:1:9: printf-style string formatting ('...' % args) is not supported by this "
     "template interpreter"},
    {"StrFormatMethod", "{{ 'a{}'.format(1) }}", StatusCode::Unimplemented,
     "case.jinja:1:4: str.format() is not supported by this template interpreter"},
};

class JinjaRenderErrorTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(JinjaRenderErrorTest, FailsWhenRendered) {
  const ErrorCase &c = GetParam();
  Expected<ChatTemplate> tmpl = ChatTemplate::parse(c.source, "case.jinja");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().toString();
  Expected<std::string> out = tmpl->render(Json::object());
  ASSERT_FALSE(out.ok()) << "rendered: " << *out;
  EXPECT_EQ(out.status().code(), c.code) << out.status().toString();
  EXPECT_EQ(out.status().message(), c.message);
}

INSTANTIATE_TEST_SUITE_P(Jinja, JinjaRenderErrorTest, ::testing::ValuesIn(kRenderErrors),
                         [](const ::testing::TestParamInfo<ErrorCase> &info) {
                           return std::string(info.param.name);
                         });

TEST(JinjaTest, VariablesMustBeAnObject) {
  Expected<ChatTemplate> tmpl = ChatTemplate::parse("x", "case.jinja");
  ASSERT_TRUE(tmpl.ok());
  Expected<std::string> out = tmpl->render(Json::array());
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::InvalidArgument);
}

TEST(JinjaTest, StrftimeNow) {
  Expected<ChatTemplate> tmpl = ChatTemplate::parse("{{ strftime_now('%Y') }}", "case.jinja");
  ASSERT_TRUE(tmpl.ok());
  Expected<std::string> out = tmpl->render(Json::object());
  ASSERT_TRUE(out.ok()) << out.status().toString();
  ASSERT_EQ(out->size(), 4u);
  for (char c : *out) {
    EXPECT_TRUE(std::isdigit(static_cast<unsigned char>(c))) << *out;
  }
}

TEST(JinjaTest, ValuesAreNotSharedBetweenRenders) {
  // A namespace is created per render; a second render must not see the first one's writes.
  Expected<ChatTemplate> tmpl = ChatTemplate::parse(
      "{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + x %}{% endfor %}"
      "{{ ns.n }}",
      "case.jinja");
  ASSERT_TRUE(tmpl.ok());
  Json vars = {{"xs", {1, 2, 3}}};
  EXPECT_EQ(*tmpl->render(vars), "6");
  EXPECT_EQ(*tmpl->render(vars), "6");
}

TEST(JinjaTest, ConcurrentRendersOfOneTemplate) {
  Expected<ChatTemplate> tmpl = ChatTemplate::parse(
      "{% macro m(x) %}<{{ x }}>{% endmacro %}{% for i in range(n) %}{{ m(i) }}{% endfor %}",
      "case.jinja");
  ASSERT_TRUE(tmpl.ok());
  std::string expected;
  for (int i = 0; i < 200; ++i) {
    expected += '<';
    expected += std::to_string(i);
    expected += '>';
  }
  std::vector<std::string> results(8);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < results.size(); ++t) {
    threads.emplace_back([&, t] {
      Expected<std::string> out = tmpl->render(Json{{"n", 200}});
      results[t] = out.ok() ? *out : out.status().toString();
    });
  }
  for (std::thread &t : threads) {
    t.join();
  }
  for (const std::string &r : results) {
    EXPECT_EQ(r, expected);
  }
}

TEST(JinjaTest, LongConversationRenders) {
  // Thousands of loop iterations and macro calls: scopes are recycled, not accumulated.
  Expected<ChatTemplate> tmpl = ChatTemplate::parse(
      "{% macro t(c) %}{{ c }}{% endmacro %}{% for m in messages %}{% set c = t(m.content) %}"
      "{{ c | length }},{% endfor %}",
      "case.jinja");
  ASSERT_TRUE(tmpl.ok());
  Json messages = Json::array();
  std::string expected;
  for (int i = 0; i < 5000; ++i) {
    messages.push_back(
        {{"role", "user"}, {"content", std::string(static_cast<size_t>(i % 7), 'x')}});
    expected += std::to_string(i % 7) + ",";
  }
  Expected<std::string> out = tmpl->render(Json{{"messages", messages}});
  ASSERT_TRUE(out.ok()) << out.status().toString();
  EXPECT_EQ(*out, expected);
}

//===------------------------------------------------------------------------------------===//
// Hostile templates (the checkpoint's own file): every bound of JinjaLimits.h refuses by name
//===------------------------------------------------------------------------------------===//

std::string repeated(std::string_view piece, size_t n) {
  std::string out;
  out.reserve(piece.size() * n);
  for (size_t i = 0; i < n; ++i) {
    out += piece;
  }
  return out;
}

/// A template that must not load, for a reason that `fragment` names.
void expectParseRefused(const std::string &source, std::string_view fragment) {
  Expected<ChatTemplate> tmpl = ChatTemplate::parse(source, "case.jinja");
  ASSERT_FALSE(tmpl.ok()) << "loaded a template that should be refused";
  EXPECT_EQ(tmpl.status().code(), StatusCode::FormatError) << tmpl.status().toString();
  EXPECT_NE(tmpl.status().message().find(fragment), std::string::npos)
      << "message '" << tmpl.status().message() << "' lacks '" << fragment << "'";
}

/// A template that loads but whose render must fail, for a reason that `fragment` names.
void expectRenderRefused(const std::string &source, std::string_view fragment,
                         const Json &variables = Json::object()) {
  Expected<ChatTemplate> tmpl = ChatTemplate::parse(source, "case.jinja");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().toString();
  Expected<std::string> out = tmpl->render(variables);
  ASSERT_FALSE(out.ok()) << "rendered " << out->size() << " bytes";
  EXPECT_EQ(out.status().code(), StatusCode::InvalidArgument) << out.status().toString();
  EXPECT_NE(out.status().message().find(fragment), std::string::npos)
      << "message '" << out.status().message().substr(0, 500) << "' lacks '" << fragment << "'";
}

std::string renderOk(const std::string &source, const Json &variables = Json::object()) {
  Expected<ChatTemplate> tmpl = ChatTemplate::parse(source, "case.jinja");
  EXPECT_TRUE(tmpl.ok()) << tmpl.status().toString();
  if (!tmpl.ok()) {
    return {};
  }
  Expected<std::string> out = tmpl->render(variables);
  EXPECT_TRUE(out.ok()) << out.status().toString();
  return out.ok() ? *out : std::string();
}

constexpr std::string_view kParserNesting =
    "nested deeper than 128 levels (the template parser's nesting limit)";

TEST(JinjaHostileTest, NestedParenthesesAreRefusedAtLoad) {
  expectParseRefused("{{ " + repeated("(", 6000) + "1" + repeated(")", 6000) + " }}",
                     kParserNesting);
  expectParseRefused("{{ " + repeated("[", 6000) + repeated("]", 6000) + " }}", kParserNesting);
  expectParseRefused("{{ " + repeated("f(", 6000) + repeated(")", 6000) + " }}", kParserNesting);
  // At the limit it still parses: a real template nests under 20.
  EXPECT_EQ(renderOk("{{ " + repeated("(", 100) + "1" + repeated(")", 100) + " }}"), "1");
}

TEST(JinjaHostileTest, NestedBlocksAreRefusedAtLoad) {
  expectParseRefused(repeated("{% if true %}", 10000) + "x" + repeated("{% endif %}", 10000),
                     kParserNesting);
  expectParseRefused(repeated("{% for i in [1] %}", 10000) + repeated("{% endfor %}", 10000),
                     kParserNesting);
  EXPECT_EQ(renderOk(repeated("{% if true %}", 100) + "x" + repeated("{% endif %}", 100)), "x");
}

TEST(JinjaHostileTest, LongFlatOperatorChainsRenderWithoutRecursion) {
  // One node per precedence level, so 100000 terms neither recurse when evaluated nor when freed.
  EXPECT_EQ(renderOk("{{ " + repeated("1 + ", 99999) + "1 }}"), "100000");
  EXPECT_EQ(renderOk("{{ 1" + repeated(" - 1", 100000) + " }}"), "-99999");
  EXPECT_EQ(renderOk("{{ 2" + repeated(" * 1", 100000) + " }}"), "2");
  EXPECT_EQ(renderOk("{{ " + repeated("1 and ", 99999) + "7 }}"), "7");
  EXPECT_EQ(renderOk("{{ " + repeated("0 or ", 99999) + "8 }}"), "8");
  EXPECT_EQ(renderOk("{{ (" + repeated("'a' ~ ", 99999) + "'a')|length }}"), "100000");
  EXPECT_EQ(renderOk("{{ " + repeated("1 < ", 99999) + "2 }}"), "False");
  // Left to right, as jinja2: (7 - 2) - 1, and errors still point at their operator.
  EXPECT_EQ(renderOk("{{ 7 - 2 - 1 }}|{{ 2 ** 3 ** 2 }}|{{ 0 or '' or 3 }}|{{ 1 and 0 and 3 }}"),
            "4|64|3|0");
  expectRenderRefused("{{ 1 + 2 + 'a' }}", "case.jinja:1:10: unsupported operand type(s) for +");
}

TEST(JinjaHostileTest, LongUnaryAndPostfixChainsAreRefusedAtLoad) {
  expectParseRefused("{{ " + repeated("not ", 100000) + "x }}", kParserNesting);
  expectParseRefused("{{ " + repeated("-", 100000) + "1 }}", kParserNesting);
  expectParseRefused("{{ x" + repeated(".a", 100000) + " }}", kParserNesting);
  expectParseRefused("{{ x" + repeated("[0]", 100000) + " }}", kParserNesting);
  expectParseRefused("{{ 'x'" + repeated("|trim", 100000) + " }}", kParserNesting);
  expectParseRefused("{{ " + repeated("1 if x else ", 10000) + "2 }}", kParserNesting);
  expectParseRefused("{{ 1" + repeated(" if x", 100000) + " }}", kParserNesting);
}

TEST(JinjaHostileTest, NestedIfMacroStopsAtTheRecursionLimit) {
  // 1.2 KB: 40 nested ifs around a recursive call. The 256-call macro cap alone let each call
  // nest 40 statement frames on the native stack (~40 KB a call, 10 MB at 256 calls), which
  // overflowed it; every statement, expression and call now counts against kMaxRenderDepth.
  const std::string source = "{% macro m(n) %}" + repeated("{% if n > 0 %}", 40) +
                             "{{ m(n - 1) }}" + repeated("{% endif %}", 40) +
                             "{% endmacro %}{{ m(300) }}";
  expectRenderRefused(source,
                      "the template recurses deeper than 1024 levels, the interpreter's recursion "
                      "limit");
  // The same macro with a shallow recursion renders.
  EXPECT_EQ(renderOk("{% macro m(n) %}" + repeated("{% if n > 0 %}", 40) + "{{ n }}{{ m(n - 1) }}" +
                     repeated("{% endif %}", 40) + "{% endmacro %}{{ m(5) }}"),
            "54321");
}

TEST(JinjaHostileTest, DeepExpressionsInRecursiveMacrosStopAtTheRecursionLimit) {
  // The heaviest frames (a filter or call per level) at the full recursion depth must fit the
  // native stack, with AddressSanitizer too.
  expectRenderRefused("{% macro m(n) %}{{ m(n - 1)" + repeated("|string", 100) +
                          " }}{% endmacro %}{{ m(1000) }}",
                      "the template recurses deeper than 1024 levels");
  expectRenderRefused("{% macro m(n) %}{{ " + repeated("[", 100) + "m(n - 1)" + repeated("]", 100) +
                          " }}{% endmacro %}{{ m(1000) }}",
                      "the template recurses deeper than 1024 levels");
  expectRenderRefused("{% macro m(n) %}{% set x %}{% filter upper %}{{ m(n - 1) }}{% endfilter %}"
                      "{% endset %}{{ x }}{% endmacro %}{{ m(1000) }}",
                      "deeper than");
}

constexpr std::string_view kStringLimit =
    "bytes, more than the 134217728 the interpreter's string limit allows";

TEST(JinjaHostileTest, HugeIndentIsRefusedBeforeAllocating) {
  expectRenderRefused("{{ 'a\\nb'|indent(1000000000000) }}",
                      "indent() would build a string of 1000000000000 bytes");
  expectRenderRefused("{{ 'a\\nb'|indent(1000000000000) }}", kStringLimit);
  // Many lines of a generous width: the total is checked, not only the width.
  expectRenderRefused("{{ ('x\\n' * 1000000)|indent(1000) }}", "indent() would build a string of");
  EXPECT_EQ(renderOk("{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent('> ', first=true) }}"),
            "a\n  b\n\n  c|> a\n> b");
  expectRenderRefused("{{ {'a': 1}|tojson(indent=1000000000000) }}",
                      "tojson() would build a string of 1000000000000 bytes");
}

TEST(JinjaHostileTest, SelfDoublingStringsStopAtTheStringLimit) {
  expectRenderRefused("{% set ns = namespace(s='ab') %}{% for i in range(60) %}"
                      "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
                      "'~' would build a string of 268435456 bytes");
  expectRenderRefused("{% set ns = namespace(s='ab') %}{% for i in range(60) %}"
                      "{% set ns.s = ns.s + ns.s %}{% endfor %}",
                      "'+' would build a string of 268435456 bytes");
  expectRenderRefused("{{ 'ab' * 1000000000000 }}", "'*' would build a string of 2000000000000");
  expectRenderRefused("{% set s = 'x' * 100000000 %}{{ s }}{{ s }}",
                      "the template's output would build a string of 200000000 bytes");
  expectRenderRefused("{% set s = 'x' * 100000000 %}{{ [s, s]|join }}",
                      "join() would build a string of 200000000 bytes");
  // Lists double too: the list limit stops them.
  expectRenderRefused("{% set ns = namespace(l=[1]) %}{% for i in range(60) %}"
                      "{% set ns.l = ns.l + ns.l %}{% endfor %}",
                      "'+' would build a list of 8388608 items, more than the 4194304");
}

TEST(JinjaHostileTest, ReplaceChainsAreRefusedBeforeAllocating) {
  expectRenderRefused("{{ 'aaaaaaaaaa'" + repeated("|replace('a', 'aaaaaaaaaa')", 12) + " }}",
                      "replace() would build a string of 1000000000 bytes");
  expectRenderRefused("{{ ('a' * 100000000).replace('', 'xy') }}",
                      "replace() would build a string of 300000002 bytes");
  EXPECT_EQ(renderOk("{{ 'aXbXc'|replace('X', '--') }}|{{ 'ab'.replace('', '.') }}"),
            "a--b--c|.a.b.");
}

constexpr std::string_view kStepBudget =
    "the template ran more than 20000000 steps, the interpreter's step budget";

TEST(JinjaHostileTest, NestedRangeLoopsStopAtTheStepBudget) {
  expectRenderRefused("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
                      "{% endfor %}",
                      kStepBudget);
  // Quadratic builtins charge their inner loops.
  expectRenderRefused("{{ (range(100000)|list + range(100000)|list)|unique|length }}", kStepBudget);
}

TEST(JinjaHostileTest, ValuesCannotNestWithoutBoundOrFormCycles) {
  // A list nested 100000 deep would overflow the stack when printed, compared or freed.
  expectRenderRefused("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}"
                      "{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}",
                      "values nest deeper than 256 levels, the interpreter's value nesting limit");
  // A namespace inside a namespace is how a cycle (never freed, never done printing) is made.
  expectRenderRefused("{% set ns = namespace(a=1) %}{% set ns.self = ns %}{{ ns }}",
                      "a namespace attribute cannot hold a namespace");
  expectRenderRefused("{% set ns = namespace(a=1) %}{% set ns.l = [1, [ns]] %}",
                      "a namespace attribute cannot hold a namespace");
  expectRenderRefused("{% set a = namespace() %}{% set b = namespace(x=a) %}",
                      "a namespace attribute cannot hold a namespace");
  EXPECT_EQ(renderOk("{% set ns = namespace(l=[]) %}{% for i in range(3) %}{% set ns.l = [ns.l] %}"
                     "{% endfor %}{{ ns.l }}"),
            "[[[[]]]]");
}

TEST(JinjaHostileTest, HugeListsAreRefused) {
  expectRenderRefused("{{ ('x' * 5000000)|list|length }}",
                      "iterating a string would build a list of 5000000 items");
  expectRenderRefused("{{ ('x,' * 5000000).split(',')|length }}", "split() would build a list of");
  expectRenderRefused("{{ [1] * 10000000 }}", "'*' would build a list of 10000000 items");
}

TEST(JinjaHostileTest, OtherBuiltinsAreBounded) {
  expectRenderRefused("{{ strftime_now('%Y' * 1000) }}", "strftime_now(): a format of 2000 bytes");
  expectRenderRefused("{{ ('&' * 100000000)|e }}", "escape() would build a string of");
  // Characters by index and slices walk the string; they build no list of its characters.
  EXPECT_EQ(renderOk("{% set s = 'aé😀b' %}{{ s[1] }}{{ s[-2] }}|{{ s[1:3] }}|{{ s[::-1] }}|"
                     "{{ s[::2] }}|{{ s[-1::-2] }}|{{ s|reverse }}|{{ s[9] is defined }}"),
            "é😀|é😀|b😀éa|a😀|bé|b😀éa|False");
}

TEST(JinjaHostileTest, OversizeTemplateTextIsRefused) {
  expectParseRefused(std::string((1u << 20) + 1, 'x'),
                     "bytes is larger than the 1048576 the template parser reads");
  // A long single line lexes in linear time (columns are counted on, not from the line start).
  EXPECT_EQ(renderOk("{{ " + repeated("1 + ", 200000) + "1 }}").size(), 6u);
}

} // namespace
} // namespace glm::server
