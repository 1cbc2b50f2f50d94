// Writes a copy of a GGUF file with tokenizer.chat_template set to a given template (the tests
// serve the stories model under real chat templates). GGUF v2/v3: header, key-values, tensor
// infos, padding to general.alignment (default 32), tensor data; only the key-values change.
import { readFileSync, writeFileSync } from 'node:fs';

const KEY = 'tokenizer.chat_template';
const SCALAR = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };

export function withChatTemplate(src, dst, template) {
  const b = readFileSync(src);
  if (b.toString('latin1', 0, 4) !== 'GGUF') throw new Error(`${src}: not a GGUF file`);
  let p = 8;
  const u32 = () => { const v = b.readUInt32LE(p); p += 4; return v; };
  const u64 = () => { const v = Number(b.readBigUInt64LE(p)); p += 8; return v; };
  const str = () => { const n = u64(); const s = b.toString('utf8', p, p + n); p += n; return s; };
  const skip = (type) => {
    if (type === 8) { str(); return; }
    if (type === 9) {
      const t = u32(), n = u64();
      for (let i = 0; i < n; i++) skip(t);
      return;
    }
    if (!(type in SCALAR)) throw new Error(`unknown GGUF value type ${type}`);
    p += SCALAR[type];
  };
  const nTensors = u64(), nKv = u64();
  const kvs = [];
  let alignment = 32;
  for (let i = 0; i < nKv; i++) {
    const start = p, key = str(), type = u32();
    if (key === 'general.alignment' && type === 4) alignment = b.readUInt32LE(p);
    skip(type);
    if (key !== KEY) kvs.push(b.subarray(start, p));
  }
  const infoStart = p;
  for (let i = 0; i < nTensors; i++) {
    str();
    const dims = u32();
    p += 8 * dims + 4 + 8;
  }
  const infos = b.subarray(infoStart, p);
  const dataStart = Math.ceil(p / alignment) * alignment;

  const text = Buffer.from(template, 'utf8');
  const kv = Buffer.alloc(8 + KEY.length + 4 + 8 + text.length);
  let q = 0;
  q = kv.writeBigUInt64LE(BigInt(KEY.length), q);
  q += kv.write(KEY, q, 'latin1');
  q = kv.writeUInt32LE(8, q);
  q = kv.writeBigUInt64LE(BigInt(text.length), q);
  text.copy(kv, q);
  const head = Buffer.from(b.subarray(0, 24));
  head.writeBigUInt64LE(BigInt(kvs.length + 1), 16);
  const meta = Buffer.concat([head, ...kvs, kv, infos]);
  const pad = Buffer.alloc(Math.ceil(meta.length / alignment) * alignment - meta.length);
  writeFileSync(dst, Buffer.concat([meta, pad, b.subarray(dataStart)]));
}
