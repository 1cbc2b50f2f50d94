//! Generation: the engine path against the CLI, streaming, stop strings, cancellation, the
//! low-level loop, and threads.

mod common;

use std::sync::Arc;
use std::thread;

use common::*;
use kestrel::{Batch, Context, ContextOptions, Engine, EngineOptions, FinishReason, GenerateOptions, KvType, Model, Sampler};

const PROMPT: &str = "Once upon a time";

fn greedy(n: i32) -> GenerateOptions {
    GenerateOptions::new().max_tokens(n).temperature(0.0)
}

#[test]
fn greedy_generate_matches_cli() {
    let path = require!(stories_path());
    let model = require!(stories());
    for (prompt, n) in [(PROMPT, 32), ("The little dog", 48)] {
        let want = require!(cli_greedy(&path, prompt, n));
        let got = model.generate(prompt, &greedy(n)).unwrap();
        assert_eq!(got, want, "prompt {:?}", prompt);
        assert!(!got.is_empty());
    }
}

#[test]
fn stream_pieces_concatenate_to_generate() {
    let model = require!(stories());
    let whole = model.generate(PROMPT, &greedy(40)).unwrap();
    let mut stream = model.stream(PROMPT, &greedy(40)).unwrap();
    let mut pieces = Vec::new();
    for piece in &mut stream {
        pieces.push(piece.unwrap());
    }
    assert!(pieces.len() > 5, "{:?}", pieces);
    assert!(pieces.iter().all(|p| !p.is_empty()));
    assert_eq!(pieces.concat(), whole);
    let result = stream.result().expect("finished");
    assert_eq!(result.n_generated, 40);
    assert_eq!(result.finish, FinishReason::Length);
    assert_eq!(result.n_prompt, model.tokenize(PROMPT, true, false).unwrap().len() as i32);
    assert!(stream.next().is_none(), "a finished stream stays finished");
}

#[test]
fn context_generate_matches_engine() {
    let model = require!(stories());
    let mut ctx = Context::new(&model, &ContextOptions::new().n_threads(1)).unwrap();
    for opts in [greedy(32), GenerateOptions::new().max_tokens(32).seed(7), greedy(32).stop([" the"])] {
        assert_eq!(ctx.generate(PROMPT, &opts).unwrap(), model.generate(PROMPT, &opts).unwrap(), "{:?}", opts);
    }
}

#[test]
fn stop_strings_end_the_text() {
    let model = require!(stories());
    let full = model.generate(PROMPT, &greedy(64)).unwrap();
    let cut = full.find('.').expect("the continuation has a full stop");
    let opts = greedy(64).stop(["."]);
    assert_eq!(model.generate(PROMPT, &opts).unwrap(), &full[..cut]);
    let mut stream = model.stream(PROMPT, &opts).unwrap();
    let text: String = (&mut stream).map(|p| p.unwrap()).collect();
    assert_eq!(text, &full[..cut]);
    assert_eq!(stream.result().unwrap().finish, FinishReason::Stop);
    // The earliest of several stop strings wins; one that never occurs changes nothing.
    let word = full.split_whitespace().nth(1).unwrap().to_string();
    let at = full.find(&word).unwrap();
    let first = if at < cut { &full[..at] } else { &full[..cut] };
    assert_eq!(model.generate(PROMPT, &greedy(64).stop([".", word.as_str()])).unwrap(), first);
    assert_eq!(model.generate(PROMPT, &greedy(64).stop(["zzzqqq"])).unwrap(), full);
    // A stop string with a NUL byte cannot be passed to C.
    assert!(model.generate(PROMPT, &greedy(4).stop(["a\0b"])).is_err());
}

#[test]
fn seeded_sampling_is_reproducible() {
    let model = require!(stories());
    let a = GenerateOptions::new().max_tokens(48).seed(7).temperature(1.0).top_k(0).top_p(1.0).min_p(0.0);
    let first = model.generate(PROMPT, &a).unwrap();
    assert_eq!(model.generate(PROMPT, &a).unwrap(), first);
    let others: Vec<String> = (8..12).map(|s| model.generate(PROMPT, &a.clone().seed(s)).unwrap()).collect();
    assert!(others.iter().any(|o| *o != first), "different seeds should differ somewhere");
    // Banning the greedy first token changes the greedy text.
    let prompt_ids = model.tokenize(PROMPT, true, false).unwrap();
    let mut ctx = Context::new(&model, &ContextOptions::new().n_threads(1)).unwrap();
    ctx.decode(&Batch::new(&prompt_ids)).unwrap();
    let top = argmax(ctx.logits(-1).unwrap());
    let banned = model.generate(PROMPT, &greedy(8).logit_bias(top, f32::NEG_INFINITY)).unwrap();
    assert_ne!(banned, model.generate(PROMPT, &greedy(8)).unwrap());
}

#[test]
fn dropping_a_stream_early_cancels_it() {
    let model = require!(stories());
    let mut stream = model.stream(PROMPT, &GenerateOptions::new().max_tokens(400).stop_at_eog(false)).unwrap();
    let first = stream.next().expect("a piece").unwrap();
    assert!(!first.is_empty());
    drop(stream);
    // Cancel explicitly too, then keep going: the engine still serves requests.
    let stream = model.stream(PROMPT, &greedy(400).stop_at_eog(false)).unwrap();
    stream.cancel();
    let rest: Vec<_> = stream.collect();
    assert!(rest.len() < 400, "a cancelled request ends early");
    for _ in 0..8 {
        let mut s = model.stream(PROMPT, &greedy(200)).unwrap();
        let _ = s.next();
    }
    assert_eq!(model.generate(PROMPT, &greedy(16)).unwrap(), model.generate(PROMPT, &greedy(16)).unwrap());
    // The model drops with requests possibly still winding down: no hang, no leak of callbacks.
    let s = model.stream(PROMPT, &greedy(300)).unwrap();
    drop(s);
    drop(model);
}

fn argmax(logits: &[f32]) -> i32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as i32
}

#[test]
fn low_level_decode_loop_matches_greedy_generate() {
    let model = require!(stories());
    let n = 32;
    let want = model.generate(PROMPT, &greedy(n)).unwrap();
    let mut ctx = Context::new(&model, &ContextOptions::new().n_threads(1)).unwrap();
    assert_eq!(ctx.n_ctx(), 512);
    assert!(!ctx.backend().is_empty());
    let prompt = model.tokenize(PROMPT, true, false).unwrap();
    let mut sampler = Sampler::new(&greedy(n)).unwrap();
    let mut detok = model.detokenizer(false).unwrap();
    ctx.decode(&Batch::new(&prompt)).unwrap();
    let mut text = String::new();
    let mut ids = Vec::new();
    for _ in 0..n {
        let logits = ctx.logits(-1).unwrap();
        assert_eq!(logits.len(), 512);
        let t = argmax(logits);
        assert_eq!(sampler.sample(logits).unwrap(), t, "the greedy sampler is argmax");
        if model.token_is_eog(t) {
            break;
        }
        ids.push(t);
        text.push_str(&detok.push(t).unwrap());
        ctx.decode(&Batch::new(&[t])).unwrap();
    }
    text.push_str(&detok.flush().unwrap());
    assert_eq!(text, want);
    assert_eq!(ctx.kv_seq_pos_max(0), Some((prompt.len() + ids.len()) as i32 - 1));

    // KV ops: drop the generated part and redo the first step with explicit positions.
    ctx.kv_seq_remove(0, prompt.len() as i32, -1).unwrap();
    assert_eq!(ctx.kv_seq_pos_max(0), Some(prompt.len() as i32 - 1));
    let pos = [prompt.len() as i32];
    ctx.decode(&Batch::new(&ids[..1]).positions(&pos).seq_ids(&[0]).logits(&[true])).unwrap();
    assert_eq!(argmax(ctx.logits(0).unwrap()), ids[1]);
    ctx.kv_clear();
    assert_eq!(ctx.kv_seq_pos_max(0), None);
    // Per-op profiling of one decode.
    ctx.set_profiling(true).unwrap();
    ctx.decode(&Batch::new(&prompt)).unwrap();
    let profile = ctx.profile(true).unwrap();
    assert!(profile.starts_with('[') && profile.contains("\"op\""), "{}", profile);
    ctx.set_profiling(false).unwrap();
    ctx.kv_clear();
    // A malformed batch and a bad row are errors, not crashes.
    assert!(ctx.decode(&Batch::new(&[1, 2]).positions(&[0])).is_err());
    assert!(ctx.decode(&Batch::new(&[100000])).is_err());
    assert!(ctx.logits(5).is_err());
}

#[test]
fn sequences_share_a_prefix() {
    let model = require!(stories());
    let mut ctx = Context::new(&model, &ContextOptions::new().n_threads(1).n_seq_max(2)).unwrap();
    let prompt = model.tokenize(PROMPT, true, false).unwrap();
    ctx.decode(&Batch::new(&prompt)).unwrap();
    let want = argmax(ctx.logits(-1).unwrap());
    ctx.kv_seq_copy(0, 1, 0, -1).unwrap();
    ctx.kv_seq_keep(1).unwrap();
    assert_eq!(ctx.kv_seq_pos_max(0), None);
    let last = prompt.len() as i32 - 1;
    assert_eq!(ctx.kv_seq_pos_max(1), Some(last));
    // Recompute the last prompt token on sequence 1: same logits as before.
    ctx.kv_seq_remove(1, last, -1).unwrap();
    ctx.decode(&Batch::new(&prompt[prompt.len() - 1..]).seq_ids(&[1])).unwrap();
    assert_eq!(argmax(ctx.logits(-1).unwrap()), want);
}

#[test]
fn two_threads_share_one_model() {
    let model = Arc::new(require!(stories()));
    let want_a = model.generate(PROMPT, &greedy(32)).unwrap();
    let want_b = model.generate("The little dog", &greedy(32)).unwrap();
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let model = Arc::clone(&model);
            thread::spawn(move || {
                let prompt = if i % 2 == 0 { PROMPT } else { "The little dog" };
                let text = model.generate(prompt, &greedy(32)).unwrap();
                // A context of its own per thread works alongside the shared engine.
                let mut ctx = Context::new(&model, &ContextOptions::new().n_threads(1)).unwrap();
                assert_eq!(ctx.generate(prompt, &greedy(32)).unwrap(), text);
                text
            })
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        let got = h.join().unwrap();
        assert_eq!(&got, if i % 2 == 0 { &want_a } else { &want_b });
    }
}

#[test]
fn an_engine_of_its_own() {
    let model = require!(stories());
    let engine = Engine::new(&model, &EngineOptions::new().n_ctx(256).n_parallel(2).n_batch(64).n_threads(1)).unwrap();
    let want = model.generate(PROMPT, &greedy(24)).unwrap();
    // Three threads submit to the same engine at once (Engine is Sync).
    thread::scope(|scope| {
        let handles: Vec<_> = (0..3).map(|_| scope.spawn(|| engine.generate(PROMPT, &greedy(24)).unwrap())).collect();
        for h in handles {
            assert_eq!(h.join().unwrap(), want);
        }
    });
    let stats = engine.stats().unwrap();
    assert!(stats.contains("tokens_generated"), "{}", stats);
    // A prompt longer than the engine's cells fails at submit with a message.
    let long = vec![1; 1000];
    let err = engine.stream_tokens(&long, &greedy(4)).unwrap_err();
    assert!(!err.message().is_empty(), "{}", err);
}

#[test]
fn an_fp8_kv_cache_reaches_the_library() {
    let model = require!(stories());
    let prompt = model.tokenize(PROMPT, true, false).unwrap();
    let logits_with = |t: KvType| {
        let mut ctx = Context::new(&model, &ContextOptions::new().n_threads(1).n_ctx(64).kv_type(t)).unwrap();
        ctx.decode(&Batch::new(&prompt)).unwrap();
        ctx.logits(-1).unwrap().to_vec()
    };
    let (f16, f8) = (logits_with(KvType::F16), logits_with(KvType::F8E4M3));
    // E4M3 keeps 3 mantissa bits: the logits move (so the setting arrived), a little.
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    for (a, b) in f16.iter().zip(&f8) {
        assert!(b.is_finite());
        diff += f64::from(a - b).powi(2);
        norm += f64::from(*a).powi(2);
    }
    assert!(diff > 0.0, "an FP8 cache gave the F16 cache's logits exactly");
    assert!(diff / norm < 0.01, "relative squared error {}", diff / norm);
    assert_eq!(logits_with(KvType::F32).len(), f16.len());
    // The block types (API 9), K and V apart.
    let q = {
        let o = ContextOptions::new().n_threads(1).n_ctx(64).kv_type(KvType::Q8_0).kv_type_v(KvType::Q4_0);
        let mut ctx = Context::new(&model, &o).unwrap();
        ctx.decode(&Batch::new(&prompt)).unwrap();
        ctx.logits(-1).unwrap().to_vec()
    };
    assert!(q.iter().all(|v| v.is_finite()) && q != f16);
    let engine = Engine::new(&model, &EngineOptions::new().n_ctx(128).n_parallel(1).n_threads(1).kv_type(KvType::F8E4M3)).unwrap();
    assert!(!engine.generate(PROMPT, &greedy(8)).unwrap().is_empty());
}

#[test]
fn model_types_are_send_and_sync_as_promised() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Model>();
    send_sync::<Engine<'static>>();
    send::<Context<'static>>();
    send::<Sampler>();
    send::<kestrel::Detokenizer<'static>>();
    send::<kestrel::Stream<'static>>();
}
