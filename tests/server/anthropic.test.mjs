// Anthropic's Messages API on kestrel serve with the official @anthropic-ai/sdk client: system
// and multi-turn messages, max_tokens, stop_sequences (stop_reason and stop_sequence), streaming
// with Anthropic's event types (the stream's final message equals the plain one), tool_use under
// tool_choice any / tool (plain and streamed, inputs valid under the schema), tool_result turns,
// thinking accepted, count_tokens, x-api-key auth and Anthropic-style errors. The stories model
// under the Qwen 2.5 template (Hermes tool calls). Run by ctest (tests/CMakeLists.txt).
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { withChatTemplate } from './gguf_template.mjs';
import { paths, results, startServer, test } from './harness.mjs';

let Anthropic;
try {
  Anthropic = (await import('@anthropic-ai/sdk')).default;
} catch {
  console.log('@anthropic-ai/sdk missing: run npm install --prefix tests/server');
  process.exit(process.env.KESTREL_REQUIRE_TESTDATA === '1' ? 1 : 77);
}
const { cli, data, model } = paths();
const dir = mkdtempSync(`${tmpdir()}/kestrel-anthropic-`);
const gguf = `${dir}/stories-qwen.gguf`;
withChatTemplate(model, gguf,
                 JSON.parse(readFileSync(`${data}/chat_templates/Qwen-Qwen2.5-7B-Instruct.json`, 'utf8')).template);
const KEY = 'anthropic-key-1';
const { server, base } = await startServer(cli, ['-m', gguf, '--port', '0', '--api-key', KEY, '--ctx-size', '4096',
                                                 '--alias', 'stories']);
const client = new Anthropic({ apiKey: KEY, baseURL: base, maxRetries: 0 });
const greedy = { model: 'stories', max_tokens: 24, temperature: 0 };
const messages = [{ role: 'user', content: 'Tell me a story.' }];
const weather = {
  name: 'get_weather', description: 'Weather in a city',
  input_schema: { type: 'object', properties: { city: { type: 'string', maxLength: 10 }, days: { type: 'integer' } },
                  required: ['city', 'days'] },
};
const textOf = (m) => m.content.filter((b) => b.type === 'text').map((b) => b.text).join('');

await test('a message: system, multi-turn, usage, stop reasons', async () => {
  const m = await client.messages.create({ ...greedy, system: 'You tell stories.', messages: [
    { role: 'user', content: 'Hi.' }, { role: 'assistant', content: 'Hello!' },
    { role: 'user', content: [{ type: 'text', text: 'Tell me a story.' }] }] });
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.match(m.id, /^msg_/);
  assert.equal(m.content[0].type, 'text');
  assert.ok(['end_turn', 'max_tokens'].includes(m.stop_reason));
  assert.equal(m.stop_sequence, null);
  assert.ok(m.usage.input_tokens > 10 && m.usage.output_tokens > 0);
  // stop_sequences: the text ends before the one that matched, which is named.
  const full = textOf(await client.messages.create({ ...greedy, messages }));
  const stop = full.slice(Math.floor(full.length / 2), Math.floor(full.length / 2) + 3);
  const s = await client.messages.create({ ...greedy, messages, stop_sequences: ['no such text', stop] });
  assert.equal(s.stop_reason, 'stop_sequence');
  assert.equal(s.stop_sequence, stop);
  assert.equal(textOf(s), full.slice(0, full.indexOf(stop)));
});

await test('streaming: Anthropic event types; the final message equals the plain one', async () => {
  const plain = await client.messages.create({ ...greedy, messages });
  const types = [];
  const stream = client.messages.stream({ ...greedy, messages });
  stream.on('streamEvent', (e) => types.push(e.type));
  const final = await stream.finalMessage();
  assert.equal(types[0], 'message_start');
  assert.equal(types.at(-1), 'message_stop');
  assert.ok(types.includes('content_block_start') && types.includes('content_block_delta') &&
            types.includes('content_block_stop') && types.includes('message_delta'));
  assert.equal(textOf(final), textOf(plain));
  assert.equal(final.stop_reason, plain.stop_reason);
});

function checkToolUse(m, name) {
  assert.equal(m.stop_reason, 'tool_use', JSON.stringify(m.content));
  const uses = m.content.filter((b) => b.type === 'tool_use');
  assert.ok(uses.length >= 1);
  for (const u of uses) {
    assert.equal(u.name, name);
    assert.match(u.id, /^toolu_/);
    assert.equal(typeof u.input.city, 'string');
    assert.ok([...u.input.city].length <= 10);
    assert.ok(Number.isInteger(u.input.days));
  }
  return uses;
}

await test('tools: tool_choice any and tool, plain and streamed; a tool_result turn', async () => {
  for (const seed of [1, 2]) {
    const m = await client.messages.create({ model: 'stories', max_tokens: 300, temperature: 1, tools: [weather],
                                             tool_choice: { type: 'any' }, messages, metadata: { user_id: `u${seed}` } });
    checkToolUse(m, 'get_weather');
  }
  const s = client.messages.stream({ model: 'stories', max_tokens: 300, tools: [weather],
                                     tool_choice: { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true },
                                     messages });
  const uses = checkToolUse(await s.finalMessage(), 'get_weather');
  assert.equal(uses.length, 1);
  const next = await client.messages.create({ ...greedy, tools: [weather], messages: [...messages,
    { role: 'assistant', content: [{ type: 'text', text: 'Checking.' }, uses[0]] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: uses[0].id, content: '21 degrees' },
                              { type: 'text', text: 'Thanks.' }] }] });
  assert.equal(next.type, 'message');
});

await test('thinking accepted; count_tokens equals the prompt a message reads', async () => {
  const t = await client.messages.create({ ...greedy, max_tokens: 2048, thinking: { type: 'enabled', budget_tokens: 1024 },
                                           messages });
  assert.equal(t.type, 'message');
  const req = { model: 'stories', system: 'Be brief.', messages, tools: [weather] };
  const counted = await client.messages.countTokens(req);
  const m = await client.messages.create({ ...req, max_tokens: 4, temperature: 0 });
  assert.equal(counted.input_tokens, m.usage.input_tokens);
});

await test('errors: Anthropic error objects, x-api-key', async () => {
  const raw = (body, headers = { 'x-api-key': KEY }) =>
    fetch(`${base}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers },
                                   body: JSON.stringify(body) });
  const cases = [
    [{ model: 'stories', messages }, 400, /max_tokens/],
    [{ ...greedy, messages: [{ role: 'user', content: [{ type: 'image', source: {} }] }] }, 400, /image/],
    [{ ...greedy, messages, temperature: 1.5 }, 400, /temperature/],
    [{ ...greedy, messages, tools: [{ type: 'web_search_20250305', name: 'web_search' }] }, 400, /server tools/],
    [{ ...greedy, messages, tool_choice: { type: 'any' } }, 400, /tools/],
    [{ ...greedy, messages, top_logprobs: 2 }, 400, /top_logprobs/],
    [{ ...greedy, messages, model: 'claude-x' }, 404, /claude-x/],
  ];
  for (const [body, status, msg] of cases) {
    const r = await raw(body);
    assert.equal(r.status, status, JSON.stringify(body).slice(0, 120));
    const j = await r.json();
    assert.equal(j.type, 'error');
    assert.equal(j.error.type, status === 404 ? 'not_found_error' : 'invalid_request_error');
    assert.match(j.error.message, msg);
  }
  const r = await raw({ ...greedy, messages }, { 'x-api-key': 'wrong' });
  assert.equal(r.status, 401);
  assert.equal((await r.json()).error.type, 'authentication_error');
  await assert.rejects(client.messages.create({ model: 'stories', messages }), (e) => e.status === 400);
  assert.equal((await raw({ ...greedy, messages }, { authorization: `Bearer ${KEY}` })).status, 200);
});

server.kill('SIGTERM');
rmSync(dir, { recursive: true, force: true });
console.log(results.failures ? `${results.failures} failed` : 'all passed');
process.exit(results.failures ? 1 : 0);
