//! The ABI guard: compares every `#[repr(C)]` mirror, enum constant and the API version with
//! what the C compiler says (`kestrel_abi_layout`, path from `KESTREL_ABI_LAYOUT`), both ways:
//! everything printed has a mirror and every mirror is printed. Skipped when the variable is
//! unset (the crate built outside the repository's ctest).

use std::collections::BTreeMap;
use std::mem::{align_of, size_of, MaybeUninit};
use std::process::Command;

use kestrel_sys::*;

/// A struct's layout: size, alignment, field offsets.
#[derive(Debug, PartialEq, Eq)]
struct Layout {
    size: usize,
    align: usize,
    fields: BTreeMap<String, usize>,
}

/// An enum's size and enumerator values.
#[derive(Debug, PartialEq, Eq)]
struct EnumValues {
    size: usize,
    values: BTreeMap<String, i64>,
}

/// Layout of a mirror struct, offsets measured through `addr_of!` on an uninit value.
macro_rules! layout {
    ($t:ident { $($f:ident),* $(,)? }) => {{
        let u = MaybeUninit::<$t>::uninit();
        let base = u.as_ptr();
        let mut fields = BTreeMap::new();
        $(
            // SAFETY: addr_of! computes the address without reading the uninit memory.
            let off = unsafe { std::ptr::addr_of!((*base).$f) as usize - base as usize };
            fields.insert(stringify!($f).to_string(), off);
        )*
        (stringify!($t).to_string(), Layout { size: size_of::<$t>(), align: align_of::<$t>(), fields })
    }};
}

/// Values of an enum's constants.
macro_rules! values {
    ($t:ident { $($c:ident),* $(,)? }) => {{
        let mut values = BTreeMap::new();
        $( values.insert(stringify!($c).to_string(), $c as i64); )*
        (stringify!($t).to_string(), EnumValues { size: size_of::<$t>(), values })
    }};
}

fn mirrors() -> BTreeMap<String, Layout> {
    vec![
        layout!(kestrel_model_options { struct_size, backend, n_threads, use_mmap, vocab_only, progress, progress_user }),
        layout!(kestrel_chat_options {
            struct_size, template_source, tools_json, extra_context_json, bos_token, eos_token, add_generation_prompt
        }),
        layout!(kestrel_context_options { struct_size, n_ctx, n_batch, n_seq_max, n_threads, kv_type, kv_type_v }),
        layout!(kestrel_batch { n_tokens, tokens, positions, seq_ids, logits }),
        layout!(kestrel_sampler_options {
            struct_size, temperature, top_k, top_p, min_p, repeat_penalty, presence_penalty, frequency_penalty,
            penalty_last_n, seed, logit_bias_tokens, logit_bias_values, n_logit_bias
        }),
        layout!(kestrel_spec_options { struct_size, mode, k_max, ngram_min, ngram_max }),
        layout!(kestrel_spec_stats { struct_size, n_steps, n_drafted, n_accepted }),
        layout!(kestrel_token_logprob { token, logprob }),
        layout!(kestrel_generate_options {
            struct_size, max_tokens, add_special, parse_special, stop_at_eog, sampling, on_token, user, speculative,
            draft, spec_stats, stop_strings, n_stop_strings, grammar, json_schema
        }),
        layout!(kestrel_engine_options {
            struct_size, n_ctx, n_parallel, n_batch, n_threads, draft_model, speculative, kv_type, kv_type_v
        }),
        layout!(kestrel_request_result {
            struct_size, finish, status, n_prompt, n_cached, n_generated, n_drafted, n_accepted, stop_string, queue_s
        }),
        layout!(kestrel_request {
            struct_size, prompt, n_prompt, max_tokens, sampling, stop_at_eog, stop_tokens, n_stop_tokens, stop_strings,
            n_stop_strings, on_token, on_logits, on_done, user, speculative, grammar, json_schema, reply
        }),
    ]
    .into_iter()
    .collect()
}

fn enums() -> BTreeMap<String, EnumValues> {
    vec![
        values!(kestrel_status {
            KESTREL_OK, KESTREL_ERR_INVALID_ARGUMENT, KESTREL_ERR_IO, KESTREL_ERR_FORMAT, KESTREL_ERR_UNSUPPORTED,
            KESTREL_ERR_OUT_OF_MEMORY, KESTREL_ERR_OUT_OF_RANGE, KESTREL_ERR_CONTEXT_FULL,
            KESTREL_ERR_BUFFER_TOO_SMALL, KESTREL_ERR_CANCELLED, KESTREL_ERR_BACKEND, KESTREL_ERR_INTERNAL
        }),
        values!(kestrel_log_level { KESTREL_LOG_DEBUG, KESTREL_LOG_INFO, KESTREL_LOG_WARN, KESTREL_LOG_ERROR, KESTREL_LOG_NONE }),
        values!(kestrel_kv_type { KESTREL_KV_F16, KESTREL_KV_F32, KESTREL_KV_F8_E4M3, KESTREL_KV_Q8_0, KESTREL_KV_Q4_0 }),
        values!(kestrel_spec_mode { KESTREL_SPEC_NONE, KESTREL_SPEC_DRAFT, KESTREL_SPEC_NGRAM }),
        values!(kestrel_pooling { KESTREL_POOLING_MODEL, KESTREL_POOLING_MEAN, KESTREL_POOLING_CLS, KESTREL_POOLING_LAST }),
        values!(kestrel_finish_reason {
            KESTREL_FINISH_NONE, KESTREL_FINISH_STOP, KESTREL_FINISH_LENGTH, KESTREL_FINISH_CANCELLED, KESTREL_FINISH_ERROR
        }),
    ]
    .into_iter()
    .collect()
}

/// What `kestrel_abi_layout` printed.
#[derive(Default)]
struct Printed {
    structs: BTreeMap<String, Layout>,
    enums: BTreeMap<String, EnumValues>,
    consts: BTreeMap<String, i64>,
}

fn number(s: &str, line: &str) -> i64 {
    s.parse().unwrap_or_else(|_| panic!("bad number {:?} in line {:?}", s, line))
}

fn parse(text: &str) -> Printed {
    let mut p = Printed::default();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut words = line.split_whitespace();
        let kind = words.next().unwrap();
        if kind == "const" {
            for kv in words {
                let (k, v) = kv.split_once('=').unwrap_or_else(|| panic!("bad line {:?}", line));
                p.consts.insert(k.to_string(), number(v, line));
            }
            continue;
        }
        let name = words.next().unwrap_or_else(|| panic!("bad line {:?}", line)).to_string();
        let mut pairs = BTreeMap::new();
        for kv in words {
            let (k, v) = kv.split_once('=').unwrap_or_else(|| panic!("bad line {:?}", line));
            pairs.insert(k.to_string(), number(v, line));
        }
        let size = pairs.remove("size").unwrap_or_else(|| panic!("no size in {:?}", line)) as usize;
        match kind {
            "struct" => {
                let align = pairs.remove("align").unwrap_or_else(|| panic!("no align in {:?}", line)) as usize;
                let fields = pairs.into_iter().map(|(k, v)| (k, v as usize)).collect();
                p.structs.insert(name, Layout { size, align, fields });
            }
            "enum" => {
                p.enums.insert(name, EnumValues { size, values: pairs });
            }
            other => panic!("unknown kind {:?} in line {:?}", other, line),
        }
    }
    p
}

#[test]
fn abi_layout_matches_c() {
    let exe = match std::env::var("KESTREL_ABI_LAYOUT") {
        Ok(p) if !p.is_empty() => p,
        _ => {
            eprintln!("abi_layout: skipped (KESTREL_ABI_LAYOUT is not set)");
            return;
        }
    };
    let out = Command::new(&exe).output().unwrap_or_else(|e| panic!("cannot run {}: {}", exe, e));
    assert!(out.status.success(), "{} failed: {:?}", exe, out.status);
    let printed = parse(&String::from_utf8(out.stdout).expect("UTF-8 output"));

    let mut problems = Vec::new();
    let ours = mirrors();
    for (name, c) in &printed.structs {
        match ours.get(name) {
            None => problems.push(format!("struct {} has no Rust mirror", name)),
            Some(r) if r != c => problems.push(format!("struct {}: C {:?} != Rust {:?}", name, c, r)),
            Some(_) => {}
        }
    }
    for name in ours.keys().filter(|n| !printed.structs.contains_key(*n)) {
        problems.push(format!("Rust mirror {} is not printed by kestrel_abi_layout", name));
    }
    let ours = enums();
    for (name, c) in &printed.enums {
        match ours.get(name) {
            None => problems.push(format!("enum {} has no Rust mirror", name)),
            Some(r) if r != c => problems.push(format!("enum {}: C {:?} != Rust {:?}", name, c, r)),
            Some(_) => {}
        }
    }
    for name in ours.keys().filter(|n| !printed.enums.contains_key(*n)) {
        problems.push(format!("Rust enum {} is not printed by kestrel_abi_layout", name));
    }
    match printed.consts.get("KESTREL_API_VERSION") {
        Some(&v) if v == KESTREL_API_VERSION as i64 => {}
        other => problems.push(format!("KESTREL_API_VERSION: C {:?} != Rust {}", other, KESTREL_API_VERSION)),
    }
    for name in printed.consts.keys().filter(|n| n.as_str() != "KESTREL_API_VERSION") {
        problems.push(format!("const {} has no Rust mirror", name));
    }
    assert!(problems.is_empty(), "ABI mismatches:\n  {}", problems.join("\n  "));
    // The library actually linked speaks the same version.
    assert_eq!(unsafe { kestrel_api_version() }, KESTREL_API_VERSION);
    assert!(printed.structs.len() >= 11 && printed.enums.len() >= 4);
}
