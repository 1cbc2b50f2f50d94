// Every case of every file in testdata/chat_templates: real chat templates rendered by Python
// Jinja2 3.1.6 with Hugging Face's settings. Output must be byte-identical; where Python failed,
// Kestrel must fail too (with raise_exception's own message where the template raised).
#include <doctest/doctest.h>

#include <dirent.h>

#include <algorithm>

#include "chat/chat_template.h"
#include "common/testdata.h"

using kestrel::ChatInputs;
using kestrel::ChatTemplate;
using json = nlohmann::ordered_json;

namespace {

std::tm fixed_clock() {  // 2025-01-15 10:30:00, as the reference renderer used
  std::tm t{};
  t.tm_year = 125;
  t.tm_mon = 0;
  t.tm_mday = 15;
  t.tm_hour = 10;
  t.tm_min = 30;
  return t;
}

std::vector<std::string> case_files(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.size() > 5 && name.substr(name.size() - 5) == ".json") out.push_back(dir + "/" + name);
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

ChatInputs inputs_of(const json& file, const json& c) {
  ChatInputs in;
  in.messages = c.at("messages");
  if (c.contains("tools") && !c["tools"].is_null()) in.tools = c["tools"];
  in.add_generation_prompt = c.at("add_generation_prompt").get<bool>();
  if (!file.at("bos_token").is_null()) in.bos_token = file["bos_token"].get<std::string>();
  if (!file.at("eos_token").is_null()) in.eos_token = file["eos_token"].get<std::string>();
  if (c.contains("extra_context")) in.extra_context = c["extra_context"];
  in.now = fixed_clock();
  return in;
}

}  // namespace

TEST_CASE("chat templates: every reference case renders byte-identically or fails like Jinja2") {
  const std::string readme = kestrel::test::testdata_file("chat_templates/README.md");
  if (readme.empty()) return;
  const auto files = case_files(readme.substr(0, readme.rfind('/')));
  REQUIRE(files.size() >= 44);
  int cases = 0, rendered = 0, identical = 0, errors = 0, errors_matched = 0;
  for (const std::string& path : files) {
    const json file = json::parse(kestrel::test::read_text_file(path));
    const std::string name = file.at("template_name").get<std::string>();
    auto tmpl = ChatTemplate::parse(file.at("template").get<std::string>());
    CHECK_MESSAGE(tmpl.ok(), name << ": " << tmpl.status().message());
    if (!tmpl.ok()) continue;
    for (const json& c : file.at("cases")) {
      ++cases;
      const std::string label = name + " / " + c.at("name").get<std::string>();
      auto out = tmpl->render(inputs_of(file, c));
      if (c.at("expected").is_string()) {
        ++rendered;
        const std::string expected = c["expected"].get<std::string>();
        CHECK_MESSAGE(out.ok(), label << ": " << out.status().message());
        if (!out.ok()) continue;
        CHECK_MESSAGE(*out == expected, label << "\n--- expected ---\n" << expected << "\n--- got ---\n" << *out);
        identical += *out == expected;
      } else {
        ++errors;
        CHECK_MESSAGE(!out.ok(), label << ": rendered although Jinja2 failed (" << c.at("error").get<std::string>() << ")");
        if (out.ok()) continue;
        CHECK(out.status().message().rfind("chat template: line ", 0) == 0);
        if (c.value("error_kind", "") == "raise_exception") {
          const std::string err = c["error"].get<std::string>();
          const std::string msg = err.substr(err.find(": ") + 2);
          const std::string& got = out.status().message();
          const bool same = got.size() >= msg.size() && got.compare(got.size() - msg.size(), msg.size(), msg) == 0;
          CHECK_MESSAGE(same, label << ": expected message '" << msg << "', got '" << got << "'");
          errors_matched += same;
        } else {
          ++errors_matched;
        }
      }
    }
  }
  MESSAGE("chat templates: " << identical << "/" << rendered << " rendered cases byte-identical, " << errors_matched << "/"
                             << errors << " errors matched, " << cases << " cases in " << files.size() << " files");
  CHECK(cases >= 423);
}
