// Tool calling and reasoning through kestrel serve with the official OpenAI client: the stories
// model served under a real chat template of each tool-call family (written into a copy of the
// GGUF), tool_choice "required" and a named function, plain and streamed, must give well-formed
// tool_calls whose arguments validate against the tool's schema, whatever the model would have
// said; auto gives prose; refusals name their field. Run by ctest (tests/CMakeLists.txt).
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { withChatTemplate } from './gguf_template.mjs';
import { openaiClass, paths, results, startServer, test } from './harness.mjs';

const OpenAI = await openaiClass();
const { cli, data, model } = paths();

// One template per family (docs/TOOLS.md); gpt-oss ships none, so a small Harmony one stands in.
const HARMONY = "{%- for m in messages %}<|start|>{{ m.role }}{% if m.role == 'assistant' %}<|channel|>final{% endif %}" +
  "<|message|>{{ m.content }}<|end|>{% endfor %}{% if add_generation_prompt %}<|start|>assistant{% endif %}";
const families = {
  hermes: 'Qwen-Qwen2.5-7B-Instruct',
  llama3: 'meta-llama-Llama-3.1-8B-Instruct',
  'mistral-nemo': 'mistralai-Mistral-Nemo-Instruct-2407',
  'mistral-v11': 'unsloth-mistral-Devstral-Small-2507',
  'deepseek-v3': 'npm-lenml-deepseek_v3',
  'glm-4.5': 'GLM-4.7-Flash',
  'qwen3-coder': 'Qwen3-Coder',
  'kimi-k2': 'Kimi-K2-Instruct',
  'functionary-v3.1': 'meetkai-functionary-medium-v3.1',
  granite: 'ibm-granite-granite-3.3-2B-Instruct',
  harmony: null,
};

const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 }, days: { type: 'integer' },
                                                unit: { type: 'string', enum: ['c', 'f'] } },
                  required: ['city', 'days', 'unit'] } } },
  { type: 'function', function: { name: 'get_time', description: 'The time in a time zone',
    parameters: { type: 'object', properties: { tz: { type: 'string', maxLength: 6 } }, required: ['tz'] } } },
];

// The arguments against the tool's schema (the subset these tools use).
function validate(call) {
  const tool = tools.find((t) => t.function.name === call.function.name);
  assert.ok(tool, `unknown function ${call.function.name}`);
  assert.equal(typeof call.function.arguments, 'string');
  const args = JSON.parse(call.function.arguments);
  assert.equal(typeof args, 'object');
  const p = tool.function.parameters;
  for (const k of p.required) assert.ok(k in args, `missing ${k} in ${call.function.arguments}`);
  for (const [k, v] of Object.entries(args)) {
    const s = p.properties[k];
    assert.ok(s, `unexpected ${k}`);
    if (s.type === 'string') assert.equal(typeof v, 'string', `${k}: ${JSON.stringify(v)}`);
    if (s.type === 'integer') assert.ok(Number.isInteger(v), `${k}: ${JSON.stringify(v)}`);
    if (s.maxLength !== undefined) assert.ok([...v].length <= s.maxLength, `${k} too long: ${JSON.stringify(v)}`);
    if (s.enum) assert.ok(s.enum.includes(v), `${k}: ${JSON.stringify(v)}`);
  }
  assert.equal(typeof call.id, 'string');
  assert.ok(call.id.length > 0);
}

async function serve(gguf) {
  const { server, base } = await startServer(cli, ['-m', gguf, '--port', '0', '--parallel', '2', '--ctx-size', '4096',
                                                   '--alias', 'stories']);
  return { server, base, client: new OpenAI({ apiKey: 'none', baseURL: `${base}/v1`, maxRetries: 0 }) };
}

const dir = mkdtempSync(`${tmpdir()}/kestrel-tools-`);
const messages = [{ role: 'system', content: 'You can call tools.' }, { role: 'user', content: 'What is the weather in Paris?' }];
const base = { model: 'stories', messages, tools, max_tokens: 400, temperature: 1.0 };

for (const [family, file] of Object.entries(families)) {
  const template = file === null ? HARMONY
    : JSON.parse(readFileSync(`${data}/chat_templates/${file}.json`, 'utf8')).template;
  const gguf = `${dir}/${family}.gguf`;
  withChatTemplate(model, gguf, template);
  const { server, client } = await serve(gguf);
  try {
    await test(`${family}: tool_choice required, plain`, async () => {
      for (const seed of [1, 2, 3]) {
        const r = await client.chat.completions.create({ ...base, tool_choice: 'required', seed });
        const c = r.choices[0];
        assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c.message));
        assert.ok(c.message.tool_calls.length >= 1);
        for (const call of c.message.tool_calls) validate(call);
      }
    });
    await test(`${family}: a named function, streamed`, async () => {
      const s = await client.chat.completions.create({ ...base, seed: 7, stream: true, parallel_tool_calls: false,
        tool_choice: { type: 'function', function: { name: 'get_time' } } });
      const calls = [];
      let finish = null;
      for await (const chunk of s) {
        const d = chunk.choices[0]?.delta;
        for (const t of d?.tool_calls ?? []) {
          calls[t.index] ??= { id: '', function: { name: '', arguments: '' } };
          if (t.id) calls[t.index].id = t.id;
          if (t.function?.name) calls[t.index].function.name += t.function.name;
          if (t.function?.arguments) calls[t.index].function.arguments += t.function.arguments;
        }
        finish = chunk.choices[0]?.finish_reason ?? finish;
      }
      assert.equal(finish, 'tool_calls');
      assert.equal(calls.length, 1);
      assert.equal(calls[0].function.name, 'get_time');
      validate(calls[0]);
    });
  } finally {
    server.kill('SIGTERM');
  }
}

{
  const gguf = `${dir}/hermes.gguf`;
  const { server, base: url, client } = await serve(gguf);
  const post = (body) => fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json' },
                                                               body: JSON.stringify(body) });
  try {
    await test('tool_choice auto: the model may answer in prose', async () => {
      const r = await client.chat.completions.create({ ...base, max_tokens: 16, temperature: 0 });
      assert.equal(typeof r.choices[0].message.content, 'string');
      assert.ok(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason));
    });
    await test('earlier tool calls and results render (arguments as JSON text)', async () => {
      const history = [...messages,
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
          function: { name: 'get_weather', arguments: '{"city": "Paris", "days": 1, "unit": "c"}' } }] },
        { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 21}' }];
      const r = await client.chat.completions.create({ ...base, messages: history, max_tokens: 8, temperature: 0 });
      assert.equal(r.object, 'chat.completion');
    });
    await test('refusals name their field', async () => {
      const cases = [
        [{ ...base, tool_choice: 'required', tools: [{ type: 'function', function: { name: 'f',
          parameters: { type: 'object', properties: { a: { type: 'string', pattern: '^x' } } } } }] }, 'tools', /pattern/],
        [{ ...base, tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice', /nope/],
        [{ ...base, tool_choice: 'sometimes' }, 'tool_choice', /tool_choice/],
        [{ ...base, tools: [{ type: 'retrieval' }] }, 'tools[0]', /function/],
        [{ ...base, tools: undefined, tool_choice: 'required' }, 'tool_choice', /tools/],
        [{ ...base, functions: [{ name: 'f' }] }, 'functions', /tools/],
        [{ ...base, reasoning_format: 'bogus' }, 'reasoning_format', /reasoning_format/],
        [{ ...base, tool_choice: 'required', response_format: { type: 'json_object' } }, 'tool_choice', /response_format/],
      ];
      for (const [body, param, msg] of cases) {
        const res = await post(body);
        assert.equal(res.status, 400, `${JSON.stringify(body).slice(0, 200)}: status ${res.status}`);
        const e = (await res.json()).error;
        assert.equal(e.param, param, e.message);
        assert.match(e.message, msg);
      }
    });
  } finally {
    server.kill('SIGTERM');
  }
}

rmSync(dir, { recursive: true, force: true });
console.log(results.failures ? `${results.failures} failed` : 'all passed');
process.exit(results.failures ? 1 : 0);
