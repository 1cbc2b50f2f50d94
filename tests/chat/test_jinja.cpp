// The Jinja interpreter on small templates: whitespace control, loops, namespace, macros,
// filters, slicing, tests, Python methods, printing, undefined values, the sandbox, error
// positions and resource limits. Expected strings were produced by Python Jinja2 3.1.6 with
// Hugging Face's settings (trim_blocks, lstrip_blocks, ImmutableSandboxedEnvironment,
// loopcontrols, HF's tojson; strftime_now at 2025-01-15 10:30:00).
#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "chat/chat_template.h"

using kestrel::ChatInputs;
using kestrel::ChatTemplate;
using json = nlohmann::ordered_json;

namespace {

struct RenderCase {
  const char* name;
  const char* tmpl;
  const char* context;  // JSON object of variables
  const char* expected;
};
struct ErrorCase {
  const char* name;
  const char* tmpl;
  const char* context;
  const char* message;  // a substring of Jinja2's message
};

const RenderCase kRenderCases[] = {
    {"trim_blocks", R"J({% if true %}
yes
{% endif %}
end)J", R"J({})J", R"J(yes
end)J"},
    {"lstrip_blocks", R"J(a
    {% if true %}
    b
    {% endif %}
c)J", R"J({})J", R"J(a
    b
c)J"},
    {"minus_modifiers", R"J(a  
  {{- 'b' -}}  
  c)J", R"J({})J", R"J(abc)J"},
    {"plus_disables_lstrip", R"J(x
  {%+ if true %}y{% endif %})J", R"J({})J", R"J(x
  y)J"},
    {"comment_trimmed", R"J(a
  {# note #}
b)J", R"J({})J", R"J(a
b)J"},
    {"trailing_newline_dropped", R"J(line
)J", R"J({})J", R"J(line)J"},
    {"raw_block", R"J({% raw %}{{ not_rendered }}{% endraw %})J", R"J({})J", R"J({{ not_rendered }})J"},
    {"var_tag_no_trim", R"J({{ 'a' }}
{{ 'b' }})J", R"J({})J", R"J(a
b)J"},
    {"loop_vars", R"J({% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %})J", R"J({"xs": [3, 1, 2], "d": {"b": 2, "a": 1}, "s": "héllo", "users": [{"name": "bo", "age": 3}, {"name": "al", "age": 1}]})J", R"J(103TrueFalse3;212FalseFalse3;321FalseTrue3;)J"},
    {"loop_prev_next", R"J({% for x in xs %}{{ loop.previtem|default('-') }}{{ x }}{{ loop.nextitem|default('-') }} {% endfor %})J", R"J({"xs": [3, 1, 2], "d": {"b": 2, "a": 1}, "s": "héllo", "users": [{"name": "bo", "age": 3}, {"name": "al", "age": 1}]})J", R"J(-31 312 12- )J"},
    {"loop_cycle_changed", R"J({% for x in [1, 1, 2] %}{{ loop.cycle('a', 'b') }}{{ loop.changed(x) }} {% endfor %})J", R"J({})J", R"J(aTrue bFalse aTrue )J"},
    {"loop_filter_else", R"J({% for x in xs if x > 1 %}{{ x }}/{{ loop.length }} {% else %}none{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %})J", R"J({"xs": [3, 1, 2], "d": {"b": 2, "a": 1}, "s": "héllo", "users": [{"name": "bo", "age": 3}, {"name": "al", "age": 1}]})J", R"J(3/2 2/2 |empty)J"},
    {"loop_break_continue", R"J({% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %})J", R"J({})J", R"J(0134)J"},
    {"loop_unpack_items", R"J({% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k, v in d|dictsort %}{{ k }}{{ v }}{% endfor %})J", R"J({"xs": [3, 1, 2], "d": {"b": 2, "a": 1}, "s": "héllo", "users": [{"name": "bo", "age": 3}, {"name": "al", "age": 1}]})J", R"J(b=2;a=1;a1b2)J"},
    {"loop_scope", R"J({% set x = 1 %}{% for i in xs %}{% set x = x + i %}{{ x }}{% endfor %}|{{ x }})J", R"J({"xs": [3, 1, 2], "d": {"b": 2, "a": 1}, "s": "héllo", "users": [{"name": "bo", "age": 3}, {"name": "al", "age": 1}]})J", R"J(423|1)J"},
    {"loop_recursive", R"J({% for n in [{'v': 1, 'c': [{'v': 2, 'c': []}]}] recursive %}{{ n.v }}@{{ loop.depth }}{% if n.c %}[{{ loop(n.c) }}]{% endif %}{% endfor %})J", R"J({})J", R"J(1@1[2@2])J"},
    {"namespace", R"J({% set ns = namespace(n=0, seen=[]) %}{% for x in xs %}{% set ns.n = ns.n + x %}{% set ns.seen = ns.seen + [x] %}{% endfor %}{{ ns.n }} {{ ns.seen }})J", R"J({"xs": [3, 1, 2], "d": {"b": 2, "a": 1}, "s": "héllo", "users": [{"name": "bo", "age": 3}, {"name": "al", "age": 1}]})J", R"J(6 [3, 1, 2])J"},
    {"set_block_and_filter", R"J({% set b %} in {{ s }} {% endset %}[{{ b }}]{% set t | upper %}x{% endset %}{{ t }}{% filter trim %}  y  {% endfilter %})J", R"J({"xs": [3, 1, 2], "d": {"b": 2, "a": 1}, "s": "héllo", "users": [{"name": "bo", "age": 3}, {"name": "al", "age": 1}]})J", R"J([ in héllo ]Xy)J"},
    {"tuple_set", R"J({% set a, b = 1, 'two' %}{{ a }}{{ b }}{% set c = (1,) %}{{ c }})J", R"J({})J", R"J(1two(1,))J"},
    {"macro_defaults_kwargs", R"J({% macro m(a, b='B', c=none) %}[{{ a }}{{ b }}{{ c }}]{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(1, c=3) }})J", R"J({})J", R"J([1BNone][12None][1B3])J"},
    {"macro_varargs_kwargs", R"J({% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k='v') }})J", R"J({})J", R"J(1(2, 3){'k': 'v'})J"},
    {"macro_caller", R"J({% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ s }}{% endcall %})J", R"J({"xs": [3, 1, 2], "d": {"b": 2, "a": 1}, "s": "héllo", "users": [{"name": "bo", "age": 3}, {"name": "al", "age": 1}]})J", R"J(<b>bold héllo</b>)J"},
    {"macro_recursion", R"J({% macro r(n) %}{{ n }}{% if n > 0 %}{{ r(n - 1) }}{% endif %}{% endmacro %}{{ r(4) }})J", R"J({})J", R"J(43210)J"},
    {"macro_sees_later_globals", R"J({% macro m() %}{{ g }}{% endmacro %}{% set g = 'late' %}{{ m() }})J", R"J({})J", R"J(late)J"},
    {"filters_strings", R"J({{ s|upper }}|{{ s|length }}|{{ '  a b  '|trim }}|{{ 'a-b'|replace('-', '+') }}|{{ 'hello world'|title }}|{{ 'hELLO'|capitalize }}|{{ 'ab'|center(6) }}|{{ 'a
b'|indent(2) }}|{{ 'a
b'|indent(2, true) }})J", R"J({"xs": [3, 1, 2], "d": {"b": 2, "a": 1}, "s": "héllo", "users": [{"name": "bo", "age": 3}, {"name": "al", "age": 1}]})J", R"J(HÉLLO|5|a b|a+b|Hello World|Hello|  ab  |a
  b|  a
  b)J"},
    {"filters_lists", R"J({{ xs|sort }}|{{ xs|sort(reverse=true) }}|{{ xs|first }}|{{ xs|last }}|{{ xs|min }}|{{ xs|max }}|{{ xs|sum }}|{{ xs|join('-') }}|{{ xs|reverse|list }}|{{ [1, 2, 1]|unique|list }}|{{ [1, 2, 3, 4, 5]|batch(2)|list }})J", R"J({"xs": [3, 1, 2], "d": {"b": 2, "a": 1}, "s": "héllo", "users": [{"name": "bo", "age": 3}, {"name": "al", "age": 1}]})J", R"J([1, 2, 3]|[3, 2, 1]|3|2|1|3|6|3-1-2|[2, 1, 3]|[1, 2]|[[1, 2], [3, 4], [5]])J"},
    {"filters_attr", R"J({{ users|map(attribute='name')|join(',') }}|{{ users|sort(attribute='age')|map(attribute='name')|list }}|{{ users|selectattr('age', 'gt', 1)|list|length }}|{{ users|rejectattr('age', 'equalto', 3)|map(attribute='name')|first }}|{{ users|sum(attribute='age') }})J", R"J({"xs": [3, 1, 2], "d": {"b": 2, "a": 1}, "s": "héllo", "users": [{"name": "bo", "age": 3}, {"name": "al", "age": 1}]})J", R"J(bo,al|['al', 'bo']|1|al|4)J"},
    {"filters_default", R"J({{ missing|default('d') }}|{{ none|default('d') }}|{{ ''|default('d', true) }}|{{ 0|default(5) }})J", R"J({})J", R"J(d|None|d|0)J"},
    {"filters_numbers", R"J({{ '42'|int + 1 }}|{{ '4.7'|int }}|{{ 'x'|int(7) }}|{{ '2.5'|float * 2 }}|{{ 2.5|round }}|{{ 3.14159|round(2) }}|{{ -3|abs }}|{{ 7|string ~ '!' }})J", R"J({})J", R"J(43|4|7|5.0|2.0|3.14|3|7!)J"},
    {"filters_select", R"J({{ xs|select('odd')|list }}|{{ xs|reject('odd')|list }}|{{ xs|map('string')|list }}|{{ d|items|list }}|{{ d|dictsort(reverse=true) }})J", R"J({"xs": [3, 1, 2], "d": {"b": 2, "a": 1}, "s": "héllo", "users": [{"name": "bo", "age": 3}, {"name": "al", "age": 1}]})J", R"J([3, 1]|[2]|['3', '1', '2']|[('b', 2), ('a', 1)]|[('b', 2), ('a', 1)])J"},
    {"tojson", R"J({{ {'b': 1, 'a': [1.0, 2.5, none, true, 'é"
']}|tojson }}|{{ d|tojson(indent=2) }}|{{ d|tojson(sort_keys=true) }}|{{ 's'|tojson }}|{{ [1, 2]|tojson(separators=(',', ':')) }})J", R"J({"xs": [3, 1, 2], "d": {"b": 2, "a": 1}, "s": "héllo", "users": [{"name": "bo", "age": 3}, {"name": "al", "age": 1}]})J", R"J({"b": 1, "a": [1.0, 2.5, null, true, "é\"\n"]}|{
  "b": 2,
  "a": 1
}|{"a": 1, "b": 2}|"s"|[1,2])J"},
    {"printing", R"J({{ none }}|{{ true }}|{{ 1.0 }}|{{ 1e16 }}|{{ 0.1 + 0.2 }}|{{ [1, 'a', none] }}|{{ {'k': 'v'} }}|{{ (1, 2) }}|{{ "it's" }}|{{ ["it's"] }})J", R"J({})J", R"J(None|True|1.0|1e+16|0.30000000000000004|[1, 'a', None]|{'k': 'v'}|(1, 2)|it's|["it's"])J"},
    {"markup_plus_str", R"J({{ '<b>'|safe + '<i>' }}|{{ ('a'|safe) ~ '<' }})J", R"J({})J", R"J(<b>&lt;i&gt;|a<)J"},
    {"slicing", R"J({{ xs[1:] }}|{{ xs[:-1] }}|{{ xs[::-1] }}|{{ xs[::2] }}|{{ s[1:3] }}|{{ s[::-1] }}|{{ s[-1] }}|{{ xs.0 }}|{{ xs[-1] }})J", R"J({"xs": [3, 1, 2], "d": {"b": 2, "a": 1}, "s": "héllo", "users": [{"name": "bo", "age": 3}, {"name": "al", "age": 1}]})J", R"J([1, 2]|[3, 1]|[2, 1, 3]|[3, 2]|él|olléh|o|3|2)J"},
    {"tests", R"J({{ missing is defined }}{{ missing is undefined }}{{ none is none }}{{ s is string }}{{ d is mapping }}{{ xs is iterable }}{{ xs is sequence }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ true is boolean }}{{ 1 is integer }}{{ 1.5 is float }}{{ 1 is number }}{{ 'a' is in 'abc' }}{{ 2 is gt 1 }}{{ false is false }})J", R"J({"xs": [3, 1, 2], "d": {"b": 2, "a": 1}, "s": "héllo", "users": [{"name": "bo", "age": 3}, {"name": "al", "age": 1}]})J", R"J(FalseTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrue)J"},
    {"operators", R"J({{ 7 // 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 7 / 2 }}|{{ 2 ** 10 }}|{{ 'ab' * 2 }}|{{ [1] + [2] }}|{{ 1 < 2 < 3 }}|{{ 'a' ~ 1 ~ none }}|{{ 1 if none else 2 }}|{{ 0 or 'x' }}|{{ not xs }}|{{ 2 in xs }}|{{ 'z' not in s }})J", R"J({"xs": [3, 1, 2], "d": {"b": 2, "a": 1}, "s": "héllo", "users": [{"name": "bo", "age": 3}, {"name": "al", "age": 1}]})J", R"J(3|-4|2|3.5|1024|abab|[1, 2]|True|a1None|2|x|False|True|True)J"},
    {"string_methods", R"J({{ ' a b '.strip() }}|{{ 'a,b,,c'.split(',') }}|{{ 'a b  c'.split() }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'abc'.startswith('a') }}|{{ 'abc'.endswith(('x', 'c')) }}|{{ 'x
'.rstrip('
') }}|{{ 'aXbX'.replace('X', '-') }}|{{ '-'.join(['a', 'b']) }}|{{ 'héllo'.find('l') }}|{{ '{} {x}'.format(1, x=2) }}|{{ '%s=%d' % ('a', 5) }})J", R"J({})J", R"J(a b|['a', 'b', '', 'c']|['a', 'b', 'c']|['a', 'b,c']|True|True|x|a-b-|a-b|2|1 2|a=5)J"},
    {"dict_methods", R"J({{ d.get('a') }}|{{ d.get('z') }}|{{ d.get('z', 0) }}|{{ d.keys()|list }}|{{ d.values()|list }}|{{ d.items()|list }}|{{ 'a' in d }})J", R"J({"xs": [3, 1, 2], "d": {"b": 2, "a": 1}, "s": "héllo", "users": [{"name": "bo", "age": 3}, {"name": "al", "age": 1}]})J", R"J(1|None|0|['b', 'a']|[2, 1]|[('b', 2), ('a', 1)]|True)J"},
    {"globals", R"J({{ range(3)|list }}|{{ range(1, 7, 2)|list }}|{{ dict(a=1) }}|{{ namespace(x=1).x }}|{{ strftime_now('%Y-%m-%d|%d %b %Y|%B %d, %Y') }})J", R"J({})J", R"J([0, 1, 2]|[1, 3, 5]|{'a': 1}|1|2025-01-15|15 Jan 2025|January 15, 2025)J"},
    {"undefined_printing", R"J([{{ missing }}][{{ missing|length }}][{{ missing|list }}][{{ missing ~ 'x' }}][{% for x in missing %}x{% endfor %}][{{ none.attr }}])J", R"J({})J", R"J([][0][[]][x][][])J"},
    {"generation_tag", R"J({% generation %}kept {{ s }}{% endgeneration %})J", R"J({"xs": [3, 1, 2], "d": {"b": 2, "a": 1}, "s": "héllo", "users": [{"name": "bo", "age": 3}, {"name": "al", "age": 1}]})J", R"J(kept héllo)J"},
};
const ErrorCase kErrorCases[] = {
    {"undefined_attribute", R"J(line1
{{ missing.attr }})J", R"J({})J", R"J('missing' is undefined)J"},
    {"undefined_dict_key_attr", R"J({{ d.zz.y }})J", R"J({"xs": [3, 1, 2], "d": {"b": 2, "a": 1}, "s": "héllo", "users": [{"name": "bo", "age": 3}, {"name": "al", "age": 1}]})J", R"J('dict object' has no attribute 'zz')J"},
    {"sandbox_append", R"J({{ xs.append(4) }})J", R"J({"xs": [3, 1, 2], "d": {"b": 2, "a": 1}, "s": "héllo", "users": [{"name": "bo", "age": 3}, {"name": "al", "age": 1}]})J", R"J(access to attribute 'append' of 'list' object is unsafe.)J"},
    {"sandbox_dict_update", R"J({% set _ = d.update({'c': 3}) %})J", R"J({"xs": [3, 1, 2], "d": {"b": 2, "a": 1}, "s": "héllo", "users": [{"name": "bo", "age": 3}, {"name": "al", "age": 1}]})J", R"J(access to attribute 'update' of 'dict' object is unsafe.)J"},
    {"raise_exception", R"J(a
b {{ raise_exception('Bad role: ' ~ 'x') }})J", R"J({})J", R"J(Bad role: x)J"},
    {"type_error_concat", R"J({{ 'a' + 1 }})J", R"J({})J", R"J(can only concatenate str (not "int") to str)J"},
    {"items_on_string", R"J({% for k, v in 'str'|items %}{% endfor %})J", R"J({})J", R"J(Can only get item pairs from a mapping.)J"},
    {"unknown_filter", R"J({{ xs|from_json }})J", R"J({"xs": [3, 1, 2], "d": {"b": 2, "a": 1}, "s": "héllo", "users": [{"name": "bo", "age": 3}, {"name": "al", "age": 1}]})J", R"J(No filter named 'from_json')J"},
    {"syntax_unclosed_if", R"J({% if true %}
no end)J", R"J({})J", R"J(Unexpected end of template)J"},
    {"syntax_bad_token", R"J(ok
  {{ 1 + }})J", R"J({})J", R"J(unexpected)J"},
    {"unknown_tag", R"J({% do xs %})J", R"J({"xs": [3, 1, 2], "d": {"b": 2, "a": 1}, "s": "héllo", "users": [{"name": "bo", "age": 3}, {"name": "al", "age": 1}]})J", R"J(Encountered unknown tag 'do')J"},
    {"division_by_zero", R"J({{ 1 / 0 }})J", R"J({})J", R"J(division by zero)J"},
    {"macro_too_many_args", R"J({% macro m(a) %}{% endmacro %}{{ m(1, 2) }})J", R"J({})J", R"J(takes not more than 1 argument)J"},
    {"namespace_only_set", R"J({% set d.x = 1 %})J", R"J({"xs": [3, 1, 2], "d": {"b": 2, "a": 1}, "s": "héllo", "users": [{"name": "bo", "age": 3}, {"name": "al", "age": 1}]})J", R"J(cannot assign attribute on non-namespace object)J"},
    {"tojson_undefined", R"J({{ missing|tojson }})J", R"J({})J", R"J(Object of type Undefined is not JSON serializable)J"},
    {"range_too_big", R"J({{ range(200000)|length }})J", R"J({})J", R"J(Range too big)J"},
};

ChatInputs inputs(const char* context) {
  ChatInputs in;
  in.extra_context = json::parse(context);
  std::tm t{};
  t.tm_year = 125;
  t.tm_mday = 15;
  t.tm_hour = 10;
  t.tm_min = 30;
  in.now = t;
  return in;
}

kestrel::Expected<std::string> render(const std::string& tmpl, const char* context = "{}") {
  auto t = ChatTemplate::parse(tmpl);
  if (!t.ok()) return t.status();
  return t->render(inputs(context));
}

// "chat template: line L, column C: ..." -> {L, C}
std::pair<int, int> position(const std::string& message) {
  int line = 0, column = 0;
  std::sscanf(message.c_str(), "chat template: line %d, column %d", &line, &column);
  return {line, column};
}

}  // namespace

TEST_CASE("jinja: templates render as Jinja2 renders them") {
  for (const RenderCase& c : kRenderCases) {
    auto out = render(c.tmpl, c.context);
    CHECK_MESSAGE(out.ok(), c.name << ": " << out.status().message());
    if (out.ok()) CHECK_MESSAGE(*out == c.expected, c.name << "\n  expected: " << c.expected << "\n  got:      " << *out);
  }
}

TEST_CASE("jinja: templates fail where Jinja2 fails, with its message") {
  for (const ErrorCase& c : kErrorCases) {
    auto out = render(c.tmpl, c.context);
    CHECK_MESSAGE(!out.ok(), c.name << " rendered: " << (out.ok() ? *out : ""));
    if (out.ok()) continue;
    const std::string& msg = out.status().message();
    CHECK_MESSAGE(msg.find(c.message) != std::string::npos, c.name << ": " << msg);
    CHECK_MESSAGE(msg.rfind("chat template: line ", 0) == 0, c.name << ": " << msg);
  }
}

TEST_CASE("jinja: error positions and status codes") {
  // Syntax errors are FORMAT and point at the offending token ("}}" on line 2, column 10).
  auto bad = ChatTemplate::parse("ok\n  {{ 1 + }}");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == KESTREL_ERR_FORMAT);
  CHECK(position(bad.status().message()) == std::pair<int, int>{2, 10});
  // Render errors are INVALID_ARGUMENT; the position is inside the failing expression.
  auto undef = render("line1\n  {{ missing.attr }}");
  REQUIRE_FALSE(undef.ok());
  CHECK(undef.status().code() == KESTREL_ERR_INVALID_ARGUMENT);
  const auto [line, column] = position(undef.status().message());
  CHECK(line == 2);
  CHECK(column >= 6);
  CHECK(column <= 17);
  CHECK(undef.status().message().find("UndefinedError: 'missing' is undefined") != std::string::npos);
  // raise_exception: exactly the template's message after the position.
  auto raised = render("{% if true %}\n{{ raise_exception('System role not supported') }}{% endif %}");
  REQUIRE_FALSE(raised.ok());
  const std::string& m = raised.status().message();
  CHECK(position(m).first == 2);
  CHECK(m.substr(m.find(": ", m.find("column")) + 2) == "System role not supported");
}

TEST_CASE("jinja: the sandbox refuses to mutate passed-in data, even after other access") {
  ChatInputs in = inputs("{}");
  in.messages = json::parse(R"([{"role": "user", "content": "hi"}])");
  auto t = ChatTemplate::parse("{{ messages|length }}{% set _ = messages.append({'role': 'x'}) %}");
  REQUIRE(t.ok());
  auto out = t->render(in);
  REQUIRE_FALSE(out.ok());
  CHECK(out.status().message().find("SecurityError: access to attribute 'append' of 'list' object is unsafe.") != std::string::npos);
  // The data is unchanged for the next render.
  auto t2 = ChatTemplate::parse("{{ messages|length }}");
  REQUIRE(t2.ok());
  CHECK(*t2->render(in) == "1");
}

TEST_CASE("jinja: hostile templates hit limits instead of crashing") {
  const char* hostile[] = {
      "{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}",                               // infinite recursion
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",   // 10^10 iterations
      "{{ 'x' * 100000000 }}",                                                               // a 100 MB string
      "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
      "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
      "{% for x in [[[1]]] recursive %}{{ loop(x) }}{% endfor %}",                         // recursive loop forever
      "{{ range(1000000)|list|length }}",                                                    // over the sandbox's range
  };
  for (const char* t : hostile) {
    const auto start = std::chrono::steady_clock::now();
    auto out = render(t);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK_MESSAGE(!out.ok(), t);
    CHECK_MESSAGE(seconds < 30, t << " took " << seconds << " s");
  }
  std::string deep_expr = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  CHECK(ChatTemplate::parse(deep_expr).status().code() == KESTREL_ERR_FORMAT);
  std::string deep_blocks;
  for (int i = 0; i < 5000; ++i) deep_blocks += "{% if true %}";
  CHECK(ChatTemplate::parse(deep_blocks).status().code() == KESTREL_ERR_FORMAT);
  // Deeply nested JSON input is refused, not recursed into.
  ChatInputs in = inputs("{}");
  in.messages = json::array();
  json* cur = &in.messages;
  for (int i = 0; i < 1000; ++i) {
    cur->push_back(json::array());
    cur = &cur->back();
  }
  auto t = ChatTemplate::parse("{{ messages|length }}");
  REQUIRE(t.ok());
  CHECK(t->render(in).status().code() == KESTREL_ERR_INVALID_ARGUMENT);
}

TEST_CASE("jinja: one parsed template renders concurrently") {
  auto t = ChatTemplate::parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + m.content|length %}"
      "<{{ m.role }}>{{ m.content|upper }}{% endfor %}{{ ns.n }}");
  REQUIRE(t.ok());
  std::vector<std::string> results(8);
  std::vector<std::thread> threads;
  for (int k = 0; k < 8; ++k) {
    threads.emplace_back([&, k] {
      ChatInputs in;
      for (int i = 0; i <= k; ++i) in.messages.push_back({{"role", "user"}, {"content", "m" + std::to_string(i)}});
      for (int rep = 0; rep < 50; ++rep) {
        auto out = t->render(in);
        results[k] = out.ok() ? *out : out.status().message();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int k = 0; k < 8; ++k) {
    std::string expected;
    for (int i = 0; i <= k; ++i) expected += "<user>M" + std::to_string(i);
    expected += std::to_string(2 * (k + 1));
    CHECK(results[k] == expected);
  }
}
