// Chat-template resource limits (runtime/chat/jinja/limits.h). A template comes with the
// model file, so it is untrusted: every operation whose output size or work it controls must be
// checked BEFORE allocating or looping. Each hostile template below used to allocate gigabytes
// (a format width of 2e9 became a 2 GB padding string) or run for minutes; now it fails at once
// with an error that names the limit, while real conversations, even large ones, still render.
#include <doctest/doctest.h>
#include <sys/resource.h>

#include <chrono>
#include <string>

#include "chat/chat_template.h"

using kestrel::ChatInputs;
using kestrel::ChatTemplate;
using json = nlohmann::ordered_json;

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

// Sanitizers slow the interpreter down several times; the bound stays far below "minutes".
constexpr double kFastSeconds = kSanitized ? 8.0 : 1.0;

long peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024;  // KiB on Linux
}

struct Outcome {
  bool ok = false;
  std::string text;  // the rendering, or the error message
  double seconds = 0;
  long rss_growth_mib = 0;  // of the process's peak RSS while rendering
};

Outcome render(const std::string& tmpl, const json& messages = json::array()) {
  Outcome o;
  const long rss_before = peak_rss_mib();
  const auto start = std::chrono::steady_clock::now();
  auto t = ChatTemplate::parse(tmpl);
  REQUIRE_MESSAGE(t.ok(), tmpl << ": " << t.status().message());
  ChatInputs in;
  in.messages = messages;
  auto out = t->render(in);
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  o.rss_growth_mib = peak_rss_mib() - rss_before;
  o.ok = out.ok();
  o.text = out.ok() ? *out : out.status().message();
  return o;
}

struct Hostile {
  const char* what;
  const char* tmpl;
  const char* error;  // a substring of the message: the limit it names
};

// Each one asks for gigabytes of output (or transient memory) through a number or a repetition
// the template chooses.
const Hostile kOutput[] = {
    {"printf width from *", "{{ '%*d'|format(2000000000, 1) }}", "output limit of "},
    {"printf width", "{{ '%2000000000d'|format(1) }}", "output limit of "},
    {"printf width, string", "{{ '%-2000000000s'|format('x') }}", "output limit of "},
    {"printf width, 20 digits", "{{ '%99999999999999999999d'|format(1) }}", "output limit of "},
    {"% operator width", "{{ '%*s' % (2000000000, 'x') }}", "output limit of "},
    {"str.format width", "{{ '{:>2000000000}'.format(1) }}", "output limit of "},
    {"str.format nested width", "{{ '{:^{}}'.format('x', 2000000000) }}", "output limit of "},
    {"str.format zero fill", "{{ '{:=2000000000}'.format(-1) }}", "output limit of "},
    {"str.format 30-digit width", "{{ '{:999999999999999999999999999999}'.format(1) }}", "output limit of "},
    {"center filter", "{{ 'x'|center(2000000000) }}", "output limit of "},
    {"str.center", "{{ 'x'.center(2000000000) }}", "output limit of "},
    {"str.ljust", "{{ 'x'.ljust(2000000000, '*') }}", "output limit of "},
    {"str.rjust", "{{ 'x'.rjust(2000000000) }}", "output limit of "},
    {"str.zfill", "{{ '1'.zfill(2000000000) }}", "output limit of "},
    {"indent width", "{{ 'a\nb'|indent(2000000000) }}", "output limit of "},
    {"indent string times lines", "{{ ('a\n' * 200000)|indent('x' * 100000) }}", "output limit of "},
    {"wordwrap string times lines", "{{ ('a' * 1000000)|wordwrap(1, true, 'x' * 10000) }}", "output limit of "},
    {"expandtabs", "{{ ('\t' * 1000000).expandtabs(1024) }}", "output limit of "},
    {"string * huge", "{{ 'ab' * 2000000000 }}", "output limit of "},
    {"string * int64 max", "{{ 'ab' * 9223372036854775807 }}", "output limit of "},
    {"list * huge", "{{ ([1, 2] * 2000000000)|length }}", "output limit of "},
    {"replace with every gap", "{{ ('a' * 100000)|replace('', 'b' * 100000) }}", "output limit of "},
    {"str.replace", "{{ ('a' * 100000).replace('a', 'b' * 100000) }}", "output limit of "},
    {"join of one big string", "{{ (['x' * 1000000] * 1000)|join }}", "output limit of "},
    {"join with a long separator", "{{ range(100000)|join('x' * 100000) }}", "output limit of "},
    {"str.join", "{{ ('-' * 100000).join(['x'] * 100000) }}", "output limit of "},
    {"tojson of one big string", "{{ (['x' * 1000000] * 1000)|tojson }}", "output limit of "},
    {"tojson indent string", "{{ ([[[[1]]]] * 100000)|tojson(indent='x' * 100000) }}", "output limit of "},
    {"tojson separators", "{{ ([1] * 100000)|tojson(separators=('x' * 100000, ':')) }}", "output limit of "},
    {"printing a list", "{{ ['x' * 1000000] * 1000 }}", "output limit of "},
    {"% with many arguments", "{{ ('%s' * 1000) % (('x' * 100000,) * 1000) }}", "output limit of "},
    {"batch fill", "{{ [1]|batch(2000000000, 0)|list }}", "output limit of "},
    {"html escape", "{{ ('<' * 15000000)|e }}", "output limit of "},
    {"output of a loop", "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "output limit of "},
};

// Work, memory, recursion and nesting: the other limits, each named.
const Hostile kOther[] = {
    {"10^10 loop iterations", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "step limit of "},
    {"quadratic unique", "{{ range(100000)|unique|list|length }}", "step limit of "},
    {"scanning a big string in a loop", "{% set s = 'x' * 10000000 %}{% for i in range(100000) %}{{ s|length }}{% endfor %}", "step limit of "},
    {"comparing big strings in a loop", "{% set s = 'x' * 10000000 %}{% for i in range(100000) %}{{ s == s ~ '' }}{% endfor %}", "step limit of "},
    {"many live strings", "{% set ns = namespace(l=[]) %}{% for i in range(100) %}{% set ns.l = ns.l + [('x' * 10000000) ~ i] %}{% endfor %}", "memory limit of "},
    {"self-calling macro", "{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}", "recursion limit of 64 exceeded"},
    {"recursive loop forever", "{% for x in [1] recursive %}{{ loop([x]) }}{% endfor %}", "recursion limit of 64 exceeded"},
    {"deeply nested list", "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l|length }}", "value nesting limit of "},
    {"namespace holding itself, printed", "{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", "value nesting limit of "},
    {"a chain of namespaces, printed",
     "{% set ns = namespace(head=namespace(), tail=none) %}{% set ns.tail = ns.head %}"
     "{% for i in range(2000) %}{% set t = namespace() %}{% set cur = ns.tail %}{% set cur.next = t %}{% set ns.tail = t %}{% endfor %}{{ ns.head }}",
     "value nesting limit of "},
    {"format spec nesting", "{{ '{:{:{:{}}}}'.format(1, 2, 3, 4) }}", "Max string recursion exceeded"},
};

void check_fails_fast(const Hostile& h) {
  const Outcome o = render(h.tmpl);
  CHECK_MESSAGE(!o.ok, h.what << ": rendered " << o.text.size() << " bytes");
  CHECK_MESSAGE(o.text.find(h.error) != std::string::npos, h.what << ": " << o.text);
  CHECK_MESSAGE(o.text.rfind("chat template: line ", 0) == 0, h.what << ": " << o.text);
  CHECK_MESSAGE(o.seconds < kFastSeconds, h.what << ": took " << o.seconds << " s");
  // The limits allow a few values of 16 MiB; gigabytes would mean a check came after the allocation.
  if (!kSanitized) CHECK_MESSAGE(o.rss_growth_mib < 400, h.what << ": peak RSS grew by " << o.rss_growth_mib << " MiB");
}

}  // namespace

TEST_CASE("jinja limits: sizes a template chooses are checked before allocating") {
  for (const Hostile& h : kOutput) check_fails_fast(h);
}

TEST_CASE("jinja limits: steps, memory, recursion and value nesting are bounded and named") {
  for (const Hostile& h : kOther) check_fails_fast(h);
}

TEST_CASE("jinja limits: the error names the limit's size and where the template asked for it") {
  const Outcome o = render("line one\n{{ 'x'|center(2000000000) }}");
  REQUIRE_FALSE(o.ok);
  CHECK(o.text == "chat template: line 2, column 8: output limit of 16777216 bytes exceeded");
  auto t = ChatTemplate::parse("{{ 'ab' * 2000000000 }}");
  REQUIRE(t.ok());
  CHECK(t->render(ChatInputs{}).status().code() == KESTREL_ERR_INVALID_ARGUMENT);
}

TEST_CASE("jinja limits: widths and precisions within the limits still format as Python does") {
  CHECK(render("{{ '%5d|%-4s|%.3f|%*d'|format(42, 'ab', 3.14159, 3, 7) }}").text == "   42|ab  |3.142|  7");
  CHECK(render("{{ '%*d'|format(-4, 7) }}|").text == "7   |");  // a negative * width aligns left
  CHECK(render("{{ '{:>6}|{:^7}|{:<3}|{:06.2f}|{:=+6}'.format('ab', 'mid', 'x', 3.14159, 5) }}").text ==
        "    ab|  mid  |x  |003.14|+    5");
  CHECK(render("{{ 'ab'|center(6) }}|{{ 'ab'.ljust(4, '*') }}|{{ '7'.zfill(3) }}|{{ 'a\tb'.expandtabs(4) }}").text ==
        "  ab  |ab**|007|a   b");
  // Huge precisions are clamped, not allocated (Python would print 2e9 digits).
  const Outcome p = render("{{ '%.2000000000f'|format(1.5) }}|{{ '{:.2000000000}'.format('abc') }}");
  CHECK(p.ok);
  CHECK(p.seconds < kFastSeconds);
  CHECK(p.text.size() < 200);
  // A fill string for str.center must be one character, as in Python.
  CHECK(render("{{ 'x'.center(5, 'ab') }}").text.find("TypeError") != std::string::npos);
}

TEST_CASE("jinja limits: a large real conversation renders within the default limits") {
  // 1024 messages of 8 KiB (8 MiB: the server's largest request body) through a ChatML template
  // that also prints each message's length: real templates use a few thousand steps per case.
  json messages = json::array();
  for (int i = 0; i < 1024; ++i)
    messages.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", std::string(8192, static_cast<char>('a' + i % 26))}});
  const Outcome o = render(
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content|trim }}<|im_end|>{{ m.content|length }}\n{% endfor %}"
      "<|im_start|>assistant\n",
      messages);
  CHECK_MESSAGE(o.ok, o.text);
  CHECK(o.text.size() > 8u * 1024 * 1024);
  CHECK(o.seconds < kFastSeconds * 2);
}

TEST_CASE("jinja limits: edge cases found while auditing the builtins fail cleanly or render right") {
  // Float to int conversions past 64 bits were undefined behaviour (UBSan reports them).
  CHECK(render("{{ '%d'|format(1e300) }}").text.find("ValueError: integer overflow") != std::string::npos);
  CHECK(render("{{ 1e300 is odd }}").text.find("ValueError: integer overflow") != std::string::npos);
  CHECK(render("{{ 9223372036854775807|round(-1) }}").text.find("ValueError: integer overflow") != std::string::npos);
  // INT64_MIN % -1 traps on x86 (SIGFPE).
  CHECK(render("{{ (-9223372036854775807 - 1) is divisibleby(-1) }}").text == "True");
  // Fields nested in a format spec number on after their field (the spec used to take 'x').
  CHECK(render("{{ '{:^{}}|'.format('x', 5) }}").text == "  x  |");
  // Breaking one long word at width 1 was quadratic (each piece copied the rest of the word).
  const Outcome w = render("{{ ('a' * 1000000)|wordwrap(1) }}");
  CHECK(w.ok);
  CHECK(w.text.size() == 1999999);
  CHECK(w.seconds < kFastSeconds);
  // A namespace that holds itself is a reference cycle: emptied when the render ends (under
  // LeakSanitizer, `make asan`, a leak otherwise).
  CHECK(render("{% set ns = namespace() %}{% set ns.me = ns %}{% set ns.l = [ns, loop] %}ok").text == "ok");
  CHECK(render("{% for x in [1, 2] %}{{ loop.changed(loop) }}{% set ns = namespace(l=loop) %}{% endfor %}").text ==
        "TrueTrue");
}
