// What the server tests share: the openai client (or a skip when npm install has not run), the
// paths (KESTREL_CLI, the stories model), starting `kestrel serve` on a free port, and named
// test steps that count failures instead of stopping.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';

const required = process.env.KESTREL_REQUIRE_TESTDATA === '1';

export async function openaiClass() {
  try {
    return (await import('openai')).default;
  } catch {
    console.log('openai package missing: run npm install --prefix tests/server');
    process.exit(required ? 1 : 77);
  }
}

export function paths() {
  const cli = process.env.KESTREL_CLI;
  const data = process.env.KESTREL_TESTDATA || new URL('../../../shared/testdata', import.meta.url).pathname;
  const model = `${data}/models/stories260K-f32.gguf`;
  if (!cli || !existsSync(model)) {
    console.log(`missing ${!cli ? 'KESTREL_CLI' : model}`);
    process.exit(required ? 1 : 77);
  }
  return { cli, data, model };
}

// Starts `kestrel serve` with args (add --port 0); resolves to { server, base } once it listens.
export async function startServer(cli, args) {
  const server = spawn(cli, ['serve', ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  const base = await new Promise((resolve, reject) => {
    let out = '';
    server.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/[\d.]+:\d+)/);
      if (m) resolve(m[1]);
    });
    server.on('exit', (code) => reject(new Error(`server exited early (${code})`)));
    setTimeout(() => reject(new Error('server did not start')), 20000);
  });
  return { server, base };
}

export const results = { failures: 0 };
export async function test(name, fn) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    results.failures++;
    console.log(`FAIL ${name}\n     ${e.stack || e}`);
  }
}
