#!/usr/bin/env node
// Load generator for `kestrel serve` over loopback: C concurrent streaming chat clients send R
// requests whose prompts share one of a few long prefixes ("system prompts") and end in a user
// message of mixed length. Reports requests/s, output tokens/s, time to first token and
// inter-token latency percentiles, and the server's prefix-cache hit rate.
//
//   node tools/dev/bench_serve.mjs -m MODEL [--cli build/kestrel] [-c 8] [-r 64] [-n 64]
//        [--parallel 8] [--ctx-size 4096] [--draft SMALL.gguf | --spec ngram] [--temp 0.7] [--json]
//                                                        (starts and stops the server itself)
//   node tools/dev/bench_serve.mjs --url http://127.0.0.1:8080 [--key KEY] ...   (a running one)
import { spawn } from 'node:child_process';

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : dflt;
};
const C = Number(opt('-c', 8)), R = Number(opt('-r', 64)), N = Number(opt('-n', 64));
const asJson = args.includes('--json');
let base = opt('--url', null);
const key = opt('--key', '');
let server = null;
if (!base) {
  const model = opt('-m', null);
  if (!model) {
    console.error('usage: bench_serve.mjs -m MODEL | --url URL  [-c CLIENTS] [-r REQUESTS] [-n MAX_TOKENS]');
    process.exit(2);
  }
  const spec = [];  // speculative decoding for every request
  if (opt('--draft', null)) spec.push('--draft', opt('--draft', null));
  if (opt('--spec', null)) spec.push('--spec', opt('--spec', null));
  server = spawn(opt('--cli', 'build/kestrel'), ['serve', '-m', model, '--port', '0', '--parallel', opt('--parallel', '8'),
                                                  '--ctx-size', opt('--ctx-size', '4096'), '--alias', 'bench', ...spec],
                 { stdio: ['ignore', 'pipe', 'inherit'] });
  base = await new Promise((resolve, reject) => {
    let out = '';
    server.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/[\d.]+:\d+)/);
      if (m) resolve(m[1]);
    });
    server.on('exit', (c) => reject(new Error(`server exited (${c})`)));
  });
}
const headers = { 'Content-Type': 'application/json', ...(key ? { Authorization: `Bearer ${key}` } : {}) };

const words = 'the a little dog cat girl boy tree park sun ball happy sad big small ran jumped saw played found said'.split(' ');
const text = (n, seed) => Array.from({ length: n }, (_, i) => words[(i * 7 + seed * 13) % words.length]).join(' ');
const systems = [0, 1, 2, 3].map((s) => `You are a storyteller. ${text(120 + 40 * s, s)}.`);

const pct = (xs, p) => {
  if (!xs.length) return 0;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
async function metric(name) {
  const t = await (await fetch(`${base}/metrics`, { headers })).text();
  const m = t.match(new RegExp(`^kestrel_${name} ([0-9.e+-]+)$`, 'm'));
  return m ? Number(m[1]) : NaN;
}

async function run(clients) {
  const ttft = [], itl = [];
  let next = 0, outTokens = 0, errors = 0;
  const cached0 = await metric('tokens_cached_total'), prompt0 = await metric('tokens_prompt_total');
  const drafted0 = await metric('spec_drafted_total'), accepted0 = await metric('spec_accepted_total');
  const t0 = performance.now();
  async function client() {
    while (next < R) {
      const i = next++;
      const body = {
        messages: [{ role: 'system', content: systems[i % systems.length] },
                   { role: 'user', content: text(5 + ((i * 37) % 120), i) }],
        max_tokens: N, temperature: Number(opt('--temp', 0.7)), seed: i, stream: true, stream_options: { include_usage: true },
      };
      const start = performance.now();
      const res = await fetch(`${base}/v1/chat/completions`, { method: 'POST', headers, body: JSON.stringify(body) });
      if (res.status !== 200) {
        errors++;
        await res.text();
        continue;
      }
      const reader = res.body.getReader(), dec = new TextDecoder();
      let buf = '', last = 0;
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let k;
        while ((k = buf.indexOf('\n\n')) >= 0) {
          const ev = buf.slice(0, k);
          buf = buf.slice(k + 2);
          if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
          const j = JSON.parse(ev.slice(6));
          if (j.usage) outTokens += j.usage.completion_tokens;
          if (!j.choices?.[0]?.delta?.content) continue;
          const now = performance.now();
          if (!last) ttft.push(now - start);
          else itl.push(now - last);
          last = now;
        }
      }
    }
  }
  await Promise.all(Array.from({ length: clients }, client));
  const s = (performance.now() - t0) / 1000;
  const cached = (await metric('tokens_cached_total')) - cached0, prompt = (await metric('tokens_prompt_total')) - prompt0;
  const drafted = (await metric('spec_drafted_total')) - drafted0, accepted = (await metric('spec_accepted_total')) - accepted0;
  return {
    clients, requests: R, errors, seconds: s, requests_per_s: R / s, output_tokens_per_s: outTokens / s,
    ttft_ms: { p50: pct(ttft, 50), p95: pct(ttft, 95), p99: pct(ttft, 99) },
    itl_ms: { p50: pct(itl, 50), p95: pct(itl, 95), p99: pct(itl, 99) },
    prefix_cache_hit_rate: prompt > 0 ? cached / prompt : 0,
    spec_drafted: drafted, spec_acceptance: drafted > 0 ? accepted / drafted : 0,
  };
}

const results = [];
for (const c of [...new Set([1, C])]) results.push(await run(c));
if (server) server.kill('SIGTERM');
if (asJson) {
  console.log(JSON.stringify(results, null, 2));
} else {
  const f = (x) => x.toFixed(1);
  console.log('| clients | requests | req/s | output tok/s | TTFT p50/p95/p99 ms | ITL p50/p95/p99 ms | prefix hit | drafts accepted | errors |');
  console.log('|---:|---:|---:|---:|---|---|---:|---:|---:|');
  for (const r of results)
    console.log(`| ${r.clients} | ${r.requests} | ${f(r.requests_per_s)} | ${f(r.output_tokens_per_s)} | ` +
                `${f(r.ttft_ms.p50)} / ${f(r.ttft_ms.p95)} / ${f(r.ttft_ms.p99)} | ` +
                `${f(r.itl_ms.p50)} / ${f(r.itl_ms.p95)} / ${f(r.itl_ms.p99)} | ${(100 * r.prefix_cache_hit_rate).toFixed(0)}% | ` +
                `${r.spec_drafted > 0 ? (100 * r.spec_acceptance).toFixed(0) + '% of ' + r.spec_drafted : '—'} | ${r.errors} |`);
}
