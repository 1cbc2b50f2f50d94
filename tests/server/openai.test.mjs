// kestrel serve against the official OpenAI client and raw HTTP: completions and chat (plain and
// streaming), models, auth, every bad-input case with its status and error body, 16 concurrent
// greedy streams equal to each alone, a shared prefix prefilled once, a bounded load test with
// client disconnects, and a clean SIGTERM. Run by ctest (tests/CMakeLists.txt); needs
// `npm install --prefix tests/server` (.ci/run does it).
import { spawn, execFileSync } from 'node:child_process';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { openaiClass, paths, results, startServer, test } from './harness.mjs';

const OpenAI = await openaiClass();
const { cli, model } = paths();
const KEY = 'test-key-123';
const { server, base } = await startServer(cli, ['-m', model, '--port', '0', '--api-key', KEY, '--parallel', '8',
                                                 '--ctx-size', '2048', '--alias', 'stories']);
const client = new OpenAI({ apiKey: KEY, baseURL: `${base}/v1`, maxRetries: 0 });
const auth = { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' };
const post = (path, body, headers = auth) =>
  fetch(base + path, { method: 'POST', headers, body: typeof body === 'string' ? body : JSON.stringify(body) });
async function expectError(res, status, param) {
  assert.equal(res.status, status, `status ${res.status}, want ${status}`);
  const j = await res.json();
  assert.equal(typeof j.error, 'object', 'an OpenAI error object');
  assert.equal(typeof j.error.message, 'string');
  assert.ok(j.error.message.length > 0);
  assert.equal(typeof j.error.type, 'string');
  if (param !== undefined) assert.equal(j.error.param, param);
  return j.error;
}
async function metric(name) {
  const t = await (await fetch(`${base}/metrics`, { headers: auth })).text();
  const m = t.match(new RegExp(`^kestrel_${name} ([0-9.e+-]+)$`, 'm'));
  assert.ok(m, `metric ${name} missing`);
  return Number(m[1]);
}
const greedy = { temperature: 0, max_tokens: 24 };
const chatText = async (content, extra = {}) =>
  (await client.chat.completions.create({ model: 'stories', messages: [{ role: 'user', content }], ...greedy, ...extra }))
    .choices[0].message.content;
async function streamText(content) {
  const s = await client.chat.completions.create({ model: 'stories', messages: [{ role: 'user', content }], ...greedy, stream: true });
  let text = '', finish = null;
  for await (const c of s) {
    text += c.choices[0]?.delta?.content ?? '';
    finish = c.choices[0]?.finish_reason ?? finish;
  }
  return { text, finish };
}

await test('models list', async () => {
  const m = await client.models.list();
  assert.deepEqual(m.data.map((x) => x.id), ['stories']);
});

await test('chat completion, then the same streamed', async () => {
  const r = await client.chat.completions.create({ model: 'stories', messages: [{ role: 'user', content: 'Once upon a time' }], ...greedy });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.ok(r.choices[0].message.content.length > 0);
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.equal(r.usage.completion_tokens <= 24, true);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  const s = await streamText('Once upon a time');
  assert.equal(s.text, r.choices[0].message.content);
  assert.equal(s.finish, r.choices[0].finish_reason);
});

await test('completions, plain and streamed; stop strings', async () => {
  const r = await client.completions.create({ model: 'stories', prompt: 'Once upon a time', ...greedy });
  assert.equal(r.object, 'text_completion');
  const text = r.choices[0].text;
  assert.ok(text.length > 10);
  const s = await client.completions.create({ model: 'stories', prompt: 'Once upon a time', ...greedy, stream: true });
  let st = '';
  for await (const c of s) st += c.choices[0]?.text ?? '';
  assert.equal(st, text);
  const stop = text.slice(Math.floor(text.length / 2), Math.floor(text.length / 2) + 3);
  const r2 = await client.completions.create({ model: 'stories', prompt: 'Once upon a time', ...greedy, stop: [stop] });
  assert.equal(r2.choices[0].text, text.slice(0, text.indexOf(stop)));
  assert.equal(r2.choices[0].finish_reason, 'stop');
});

await test('streaming is SSE as OpenAI sends it', async () => {
  const res = await post('/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }], ...greedy, stream: true });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /^text\/event-stream/);
  const body = await res.text();
  const events = body.split('\n\n').filter((e) => e.length);
  for (const e of events) assert.match(e, /^data: /);
  assert.equal(events.at(-1), 'data: [DONE]');
  const first = JSON.parse(events[0].slice(6));
  assert.equal(first.object, 'chat.completion.chunk');
  assert.equal(first.choices[0].delta.role, 'assistant');
});

await test('auth failure', async () => {
  const bad = new OpenAI({ apiKey: 'wrong', baseURL: `${base}/v1`, maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e.status === 401);
  await expectError(await fetch(`${base}/v1/models`), 401);
  await expectError(await post('/v1/completions', { prompt: 'x' }, { Authorization: 'Bearer test-key-12' }), 401);
  assert.equal((await fetch(`${base}/health`)).status, 200);  // health and the page need no key
});

await test('bad requests: status and error body', async () => {
  await assert.rejects(client.chat.completions.create({ model: 'stories', messages: [] }), (e) => e.status === 400);
  await expectError(await post('/v1/chat/completions', '{"messages": [', auth), 400);
  await expectError(await post('/v1/chat/completions', '[1,2]', auth), 400);
  await expectError(await post('/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], temperature: 'hot' }), 400, 'temperature');
  await expectError(await post('/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], max_tokens: -1 }), 400, 'max_tokens');
  await expectError(await post('/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], stream: 'yes' }), 400, 'stream');
  await expectError(await post('/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], n: 0 }), 400, 'n');
  await expectError(await post('/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], logit_bias: { 999999: 5 } }), 400, 'logit_bias');
  await expectError(await post('/v1/chat/completions', { messages: [{ content: 'no role' }] }), 400);
  await expectError(await post('/v1/chat/completions', { messages: 'hello' }), 400, 'messages');
  await expectError(await post('/v1/chat/completions', {}), 400, 'messages');
  const e = await expectError(await post('/v1/chat/completions', { model: 'gpt-4', messages: [{ role: 'user', content: 'x' }] }), 404, 'model');
  assert.equal(e.code, 'model_not_found');
  await expectError(await post('/v1/completions', { prompt: 42 }), 400, 'prompt');
  const long = 'once upon a time there was a dog '.repeat(400);
  const c = await expectError(await post('/v1/completions', { prompt: long }), 400);
  assert.equal(c.code, 'context_length_exceeded');
  await expectError(await post('/v1/completions', JSON.stringify({ prompt: 'x'.repeat(9 << 20) })), 413);
  await expectError(await post('/detokenize', { tokens: [1, -5] }), 400, 'tokens');
  await expectError(await post('/tokenize', { content: 7 }), 400, 'content');
  assert.equal((await fetch(`${base}/health`)).status, 200);  // still alive
});

await test('tokenize / detokenize round trip', async () => {
  const t = await (await post('/tokenize', { content: 'Once upon a time' })).json();
  assert.ok(Array.isArray(t.tokens) && t.tokens.length > 0);
  const d = await (await post('/detokenize', { tokens: t.tokens })).json();
  assert.equal(d.content.trim(), 'Once upon a time');
});

await test('16 concurrent greedy streams equal each run alone', async () => {
  const prompts = Array.from({ length: 16 }, (_, i) => ['The dog', 'Lily went', 'A big tree', 'Tom had'][i % 4] + ' ' + 'and then '.repeat(i % 5));
  const alone = [];
  for (const p of prompts) alone.push((await streamText(p)).text);
  const together = await Promise.all(prompts.map((p) => streamText(p)));
  together.forEach((t, i) => assert.equal(t.text, alone[i], `request ${i}`));
});

await test('a common 200-token prefix is prefilled once', async () => {
  const before = await metric('tokens_cached_total');
  const prefix = 'the cat sat on the mat and looked at the sun. '.repeat(20);
  await client.completions.create({ model: 'stories', prompt: prefix + 'Then', temperature: 0, max_tokens: 2 });
  const r = await client.completions.create({ model: 'stories', prompt: prefix + 'After that', temperature: 0, max_tokens: 2 });
  const cached = (await metric('tokens_cached_total')) - before;
  assert.ok(r.usage.prompt_tokens >= 200, `prompt ${r.usage.prompt_tokens} tokens`);
  assert.ok(cached >= 192, `cached ${cached}`);
  assert.ok(r.usage.prompt_tokens_details.cached_tokens >= 192);
});

await test('n > 1: each choice equals a request alone with seed + index; streamed; the prompt computed once', async () => {
  const prompt = 'the dog ran to the park and played with a ball. '.repeat(12) + 'Then';
  const one = { model: 'stories', prompt, temperature: 1, max_tokens: 12 };
  const before = await metric('tokens_cached_total');
  const r = await client.completions.create({ ...one, n: 4, seed: 5 });
  const cached = (await metric('tokens_cached_total')) - before;
  assert.equal(r.choices.length, 4);
  assert.ok(cached >= 3 * 96, `cached ${cached}: the other choices share the first one's prompt blocks`);
  const alone = [];
  let tokens = 0;
  for (let i = 0; i < 4; i++) {
    const a = await client.completions.create({ ...one, seed: 5 + i });
    alone.push(a.choices[0]);
    tokens += a.usage.completion_tokens;
  }
  r.choices.forEach((c, i) => {
    assert.equal(c.index, i);
    assert.equal(c.text, alone[i].text, `choice ${i}`);
    assert.equal(c.finish_reason, alone[i].finish_reason);
  });
  assert.equal(r.usage.completion_tokens, tokens);  // summed over the choices
  assert.equal(r.usage.prompt_tokens, (await client.completions.create({ ...one, max_tokens: 1 })).usage.prompt_tokens);
  assert.ok(new Set(r.choices.map((c) => c.text)).size > 1, 'different seeds, different texts');
  // Chat, streamed: each index's deltas add up to its choice.
  const messages = [{ role: 'user', content: 'Tell me a story.' }];
  const chat = { model: 'stories', messages, temperature: 1, max_tokens: 12, seed: 9 };
  const whole = await client.chat.completions.create({ ...chat, n: 3 });
  const s = await client.chat.completions.create({ ...chat, n: 3, stream: true, stream_options: { include_usage: true } });
  const texts = ['', '', ''], finish = [null, null, null];
  let usage = null;
  for await (const chunk of s) {
    for (const c of chunk.choices) {
      texts[c.index] += c.delta?.content ?? '';
      finish[c.index] = c.finish_reason ?? finish[c.index];
    }
    usage = chunk.usage ?? usage;
  }
  whole.choices.forEach((c, i) => {
    assert.equal(texts[i], c.message.content, `choice ${i}`);
    assert.equal(finish[i], c.finish_reason);
  });
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
  await expectError(await post('/v1/completions', { prompt: 'x', n: 9 }), 400, 'n');
});

await test('load: 300 requests, 32 at a time, some dropped mid-stream', async () => {
  let next = 0, fivexx = 0, ok = 0, aborted = 0;
  async function worker() {
    while (next < 300) {
      const i = next++;
      const ac = new AbortController();
      const body = { messages: [{ role: 'user', content: `Story ${i % 7}: ` + 'once '.repeat(i % 40) }], temperature: 0.8,
                     max_tokens: 8 + (i % 24), stream: i % 2 === 0, seed: i };
      try {
        const res = await fetch(`${base}/v1/chat/completions`, { method: 'POST', headers: auth, body: JSON.stringify(body), signal: ac.signal });
        if (res.status >= 500) fivexx++;
        if (i % 10 === 3) {  // read a little, then hang up
          const reader = res.body.getReader();
          await reader.read();
          ac.abort();
          aborted++;
          continue;
        }
        await res.text();
        if (res.status === 200) ok++;
      } catch (e) {
        if (e.name !== 'AbortError') throw e;
      }
    }
  }
  await Promise.all(Array.from({ length: 32 }, worker));
  assert.equal(fivexx, 0);
  assert.ok(ok >= 260, `${ok} succeeded`);
  // Every KV block free or cached once the dropped requests are cancelled.
  for (let t = 0; t < 50 && (await metric('kv_blocks_used')) > 0; t++) await new Promise((r) => setTimeout(r, 100));
  assert.equal(await metric('kv_blocks_used'), 0);
  assert.equal(await metric('requests_running'), 0);
  console.log(`     ${ok} ok, ${aborted} dropped by the client, prefix hit rate ${await metric('prefix_cache_hit_rate')}`);
});

await test('structured output: response_format json_schema and json_object, plain and streamed; refusals', async () => {
  const schema = {
    type: 'object',
    properties: {
      title: { type: 'string', maxLength: 12 },
      pets: { type: 'array', maxItems: 2, items: { type: 'object', properties: { kind: { enum: ['cat', 'dog'] }, age: { type: 'integer', minimum: 0 } },
                                                   required: ['kind', 'age'], additionalProperties: false } },
      done: { type: 'boolean' },
    },
    required: ['title', 'pets', 'done'],
    additionalProperties: false,
  };
  const valid = (text) => {
    const j = JSON.parse(text);
    assert.deepEqual(Object.keys(j), ['title', 'pets', 'done']);
    assert.equal(typeof j.title, 'string');
    assert.ok([...j.title].length <= 12);
    assert.ok(Array.isArray(j.pets) && j.pets.length <= 2);
    for (const p of j.pets) {
      assert.deepEqual(Object.keys(p), ['kind', 'age']);
      assert.ok(['cat', 'dog'].includes(p.kind));
      assert.ok(Number.isInteger(p.age) && p.age >= 0);
    }
    assert.equal(typeof j.done, 'boolean');
  };
  const response_format = { type: 'json_schema', json_schema: { name: 'story', strict: true, schema } };
  for (const [temperature, seed] of [[0, 0], [1, 7], [1.3, 8]]) {
    const r = await client.chat.completions.create({ model: 'stories', messages: [{ role: 'user', content: 'Tell me' }],
                                                     temperature, seed, max_tokens: 400, response_format });
    assert.equal(r.choices[0].finish_reason, 'stop');
    valid(r.choices[0].message.content);
  }
  const s = await client.chat.completions.create({ model: 'stories', messages: [{ role: 'user', content: 'Tell me' }],
                                                   temperature: 0, max_tokens: 400, response_format, stream: true });
  let text = '';
  for await (const c of s) text += c.choices[0]?.delta?.content ?? '';
  valid(text);
  const o = await client.chat.completions.create({ model: 'stories', messages: [{ role: 'user', content: 'Hi' }], temperature: 0.7,
                                                   seed: 3, max_tokens: 400, response_format: { type: 'json_object' } });
  // Any object may run past max_tokens (finish 'length', cut as OpenAI cuts it); ended, it parses.
  const otext = o.choices[0].message.content;
  assert.ok(otext.trimStart().startsWith('{'));
  if (o.choices[0].finish_reason === 'stop') {
    const obj = JSON.parse(otext);
    assert.ok(typeof obj === 'object' && !Array.isArray(obj) && obj !== null);
  } else {
    assert.equal(o.choices[0].finish_reason, 'length');
  }
  // llama.cpp's "grammar" field, on completions.
  const g = await post('/v1/completions', { prompt: 'Once', temperature: 0, max_tokens: 40, grammar: 'root ::= " upon a " ("time" | "hill")' });
  assert.equal(g.status, 200);
  assert.match((await g.json()).choices[0].text, /^ upon a (time|hill)$/);
  // What cannot be enforced is a 400 naming it, never unconstrained text.
  const bad = await post('/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }], response_format: {
    type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { a: { type: 'string', pattern: '^a+$' } } } } } });
  const e = await expectError(bad, 400, 'response_format');
  assert.match(e.message, /'pattern'/);
  await expectError(await post('/v1/completions', { prompt: 'x', grammar: 'root ::= nothing' }), 400, undefined);
});

await test('logprobs: chat and completions, plain and streamed; refusals', async () => {
  const messages = [{ role: 'user', content: 'Tell me a story.' }];
  const chat = await client.chat.completions.create({ model: 'stories', messages, ...greedy, logprobs: true, top_logprobs: 3 });
  const c = chat.choices[0];
  const entries = c.logprobs.content;
  assert.ok(entries.length > 0);
  const bytes = [];
  for (const e of entries) {
    assert.equal(e.top_logprobs.length, 3);
    assert.ok(e.logprob <= 0);
    for (let i = 1; i < 3; i++) assert.ok(e.top_logprobs[i - 1].logprob >= e.top_logprobs[i].logprob);
    // greedy: each token is its row's most likely one
    assert.equal(e.token, e.top_logprobs[0].token);
    assert.equal(e.logprob, e.top_logprobs[0].logprob);
    bytes.push(...e.bytes);
  }
  assert.equal(Buffer.from(bytes).toString('utf8'), c.message.content);  // the tokens are the text
  // Streamed: the same entries, spread over the chunks.
  const s = await client.chat.completions.create({ model: 'stories', messages, ...greedy, logprobs: true, top_logprobs: 3,
                                                    stream: true });
  const streamed = [];
  for await (const chunk of s) streamed.push(...(chunk.choices[0]?.logprobs?.content ?? []));
  assert.deepEqual(streamed, entries);
  // Completions: logprobs N, OpenAI's legacy shape.
  const comp = await client.completions.create({ model: 'stories', prompt: 'Once upon a time', ...greedy, logprobs: 2 });
  const lp = comp.choices[0].logprobs;
  assert.equal(lp.tokens.length, lp.token_logprobs.length);
  assert.equal(lp.tokens.join(''), comp.choices[0].text);
  for (let i = 0; i < lp.tokens.length; i++) {
    assert.ok(Object.keys(lp.top_logprobs[i]).length <= 2);
    assert.equal(Math.max(...Object.values(lp.top_logprobs[i])), lp.token_logprobs[i]);
    if (i > 0) assert.ok(lp.text_offset[i] > lp.text_offset[i - 1]);
  }
  // Off unless asked.
  assert.equal((await client.chat.completions.create({ model: 'stories', messages, ...greedy })).choices[0].logprobs, null);
  await expectError(await post('/v1/chat/completions', { messages, top_logprobs: 3 }), 400, 'top_logprobs');
  await expectError(await post('/v1/chat/completions', { messages, logprobs: true, top_logprobs: 21 }), 400, 'top_logprobs');
  await expectError(await post('/v1/completions', { prompt: 'x', logprobs: 6 }), 400, 'logprobs');
});

await test('embeddings: the openai client (base64), floats, dimensions, token input, batches, refusals', async () => {
  const texts = ['Once upon a time', 'The cat sat on the mat.', 'Hi'];
  const r = await client.embeddings.create({ model: 'stories', input: texts });  // the client asks for base64
  assert.equal(r.object, 'list');
  assert.equal(r.data.length, 3);
  const unit = (v) => Math.abs(Math.hypot(...v) - 1) < 1e-5;
  for (const [i, d] of r.data.entries()) {
    assert.equal(d.index, i);
    assert.equal(d.embedding.length, 64);  // stories260K's n_embd
    assert.ok(unit(d.embedding));
  }
  assert.ok(r.usage.prompt_tokens > 3);
  const floats = await (await post('/v1/embeddings', { input: texts, encoding_format: 'float' })).json();
  floats.data.forEach((d, i) => d.embedding.forEach((x, k) => assert.ok(Math.abs(x - r.data[i].embedding[k]) < 1e-6)));
  // One at a time: the same vectors as the batch.
  for (const [i, t] of texts.entries()) {
    const one = await (await post('/v1/embeddings', { input: t, encoding_format: 'float' })).json();
    one.data[0].embedding.forEach((x, k) => assert.ok(Math.abs(x - floats.data[i].embedding[k]) < 1e-5));
  }
  // Token ids: the text's tokens give the text's vector.
  const ids = (await (await post('/tokenize', { content: texts[0], add_special: true })).json()).tokens;
  const byIds = await (await post('/v1/embeddings', { input: [ids], encoding_format: 'float' })).json();
  byIds.data[0].embedding.forEach((x, k) => assert.ok(Math.abs(x - floats.data[0].embedding[k]) < 1e-6));
  // Fewer dimensions: the first d, of unit length.
  const d16 = await (await post('/v1/embeddings', { input: texts[1], encoding_format: 'float', dimensions: 16 })).json();
  assert.equal(d16.data[0].embedding.length, 16);
  assert.ok(unit(d16.data[0].embedding));
  const scale = Math.hypot(...floats.data[1].embedding.slice(0, 16));
  d16.data[0].embedding.forEach((x, k) => assert.ok(Math.abs(x - floats.data[1].embedding[k] / scale) < 1e-5));
  await expectError(await post('/v1/embeddings', { input: '' }), 400, 'input');
  await expectError(await post('/v1/embeddings', { input: [] }), 400, 'input');
  await expectError(await post('/v1/embeddings', { input: [[1, 999999]] }), 400, 'input');
  await expectError(await post('/v1/embeddings', { input: 'x', dimensions: 65 }), 400, 'dimensions');
  await expectError(await post('/v1/embeddings', { input: 'x', encoding_format: 'int8' }), 400, 'encoding_format');
  await expectError(await post('/v1/embeddings', { input: 'x', truncate: true }), 400, 'truncate');
});

await test('the web page is served', async () => {
  const r = await fetch(base + '/');
  assert.equal(r.status, 200);
  const html = await r.text();
  assert.match(html, /<title>Kestrel<\/title>/);
  assert.doesNotMatch(html, /<script src=|<link [^>]*href="http/);  // self-contained
});

await test('the web page in headless Chromium streams a reply (screenshot saved)', async () => {
  const chrome = ['chromium', 'chromium-browser', 'google-chrome']
    .map((c) => { try { return execFileSync('sh', ['-c', `command -v ${c}`]).toString().trim(); } catch { return ''; } })
    .find(Boolean);
  if (!chrome) {
    if (process.env.KESTREL_REQUIRE_TESTDATA === '1') throw new Error('chromium not found');
    console.log('     (skipped: no chromium)');
    return;
  }
  // Drive it over the DevTools protocol: open the page (it sends its ?q= message on load), wait
  // until the streamed reply is complete, read it, save a screenshot.
  const { default: WebSocket } = await import('ws');
  const browser = spawn(chrome, ['--headless', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run',
                                 '--remote-debugging-port=0', '--window-size=900,700', 'about:blank'],
                        { stdio: ['ignore', 'ignore', 'pipe'] });
  try {
    const devtools = await new Promise((resolve, reject) => {
      let err = '';
      browser.stderr.on('data', (d) => {
        err += d;
        const m = err.match(/DevTools listening on ws:\/\/([\d.]+:\d+)\//);
        if (m) resolve(m[1]);
      });
      setTimeout(() => reject(new Error('chromium did not start: ' + err.slice(-500))), 30000);
    });
    const url = `${base}/?q=${encodeURIComponent('Once upon a time')}&send=1&key=${KEY}`;
    const target = await (await fetch(`http://${devtools}/json/new?${encodeURIComponent(url)}`, { method: 'PUT' })).json();
    const ws = new WebSocket(target.webSocketDebuggerUrl);
    await new Promise((r, j) => { ws.on('open', r); ws.on('error', j); });
    let seq = 0;
    const pending = new Map();
    ws.on('message', (m) => {
      const j = JSON.parse(m);
      if (j.id && pending.has(j.id)) pending.get(j.id)(j), pending.delete(j.id);
    });
    const call = (method, params = {}) => new Promise((r) => { const id = ++seq; pending.set(id, r); ws.send(JSON.stringify({ id, method, params })); });
    const evaluate = async (expr) => (await call('Runtime.evaluate', { expression: expr, returnByValue: true })).result?.result?.value;
    // The page's default reply is up to 1024 tokens (greedy stories260K writes ~900): on a loaded
    // 2-core machine that takes over 30 s, so allow 150.
    let state = null;
    for (let t = 0; t < 1500 && state !== 'done'; t++) {
      state = await evaluate("document.querySelector('.msg.assistant')?.dataset.state ?? null");
      if (state !== 'done') await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(state, 'done', 'the streamed reply did not finish');
    const reply = await evaluate("document.querySelector('.msg.assistant').textContent");
    const cls = await evaluate("document.querySelector('.msg.assistant').className");
    assert.equal(cls, 'msg assistant', `the page shows an error: ${reply}`);
    assert.ok(reply.trim().length > 0, 'the assistant message is empty');
    console.log(`     page shows: ${JSON.stringify(reply.slice(0, 60))}...`);
    const shot = await call('Page.captureScreenshot', { format: 'png' });
    const file = `${process.cwd()}/server-webpage.png`;
    writeFileSync(file, Buffer.from(shot.result.data, 'base64'));
    console.log(`     screenshot: ${file}`);
    ws.close();
  } finally {
    browser.kill('SIGKILL');
  }
});

await test('SIGTERM drains and exits 0', async () => {
  const code = await new Promise((resolve) => {
    server.on('exit', (c) => resolve(c));
    server.kill('SIGTERM');
  });
  assert.equal(code, 0);
});

if (server.exitCode === null) server.kill('SIGKILL');
console.log(results.failures ? `${results.failures} failed` : 'all passed');
process.exit(results.failures ? 1 : 0);
