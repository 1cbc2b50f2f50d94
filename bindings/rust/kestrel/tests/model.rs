//! Loading, describing, tokenizing and errors.

mod common;

use std::fs;

use common::*;
use kestrel::{Model, ModelOptions, Status};

#[test]
fn load_and_describe() {
    let model = require!(stories());
    assert_eq!(model.n_vocab(), 512);
    assert_eq!(model.n_ctx_train(), 512);
    assert_eq!(model.token_bos(), Some(1));
    assert_eq!(model.token_eos(), Some(2));
    assert!(model.token_is_eog(2));
    assert!(!model.token_is_eog(100));
    let json = model.describe().unwrap();
    assert!(json.trim_start().starts_with('{') && json.trim_end().ends_with('}'), "{}", json);
    assert!(json.contains("llama"), "{}", json);
    assert_eq!(kestrel::api_version(), kestrel::sys::KESTREL_API_VERSION);
}

/// The test cases of a `.inp` file (format in testdata/tokenizer/README.md).
fn read_cases(inp: &str) -> Vec<&str> {
    let mut cases: Vec<&str> = inp.split("\n__ggml_vocab_test__\n").collect();
    assert_eq!(cases.pop(), Some(""), "the file ends with a separator");
    cases
}

#[test]
fn tokenize_matches_reference_vectors() {
    let model = require!(stories());
    let inp = require!(testdata_file("tokenizer/stories260K.inp"));
    let out = require!(testdata_file("tokenizer/stories260K.out"));
    let inp = fs::read_to_string(inp).unwrap();
    let out = fs::read_to_string(out).unwrap();
    let cases = read_cases(&inp);
    let expected: Vec<Vec<i32>> = out
        .lines()
        .map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect())
        .collect();
    assert_eq!(cases.len(), 46);
    assert_eq!(cases.len(), expected.len());
    for (text, want) in cases.iter().zip(&expected) {
        let got = model.tokenize(text, false, false).unwrap();
        assert_eq!(&got, want, "tokenize {:?}", text);
        // Whole-sequence detokenization is the pieces' bytes without the leading space that
        // SentencePiece added itself.
        let bytes = model.detokenize_bytes(&got, false).unwrap();
        let pieces: Vec<u8> = got.iter().flat_map(|&t| model.token_to_piece(t, false).unwrap()).collect();
        let pieces = if pieces.first() == Some(&b' ') { &pieces[1..] } else { &pieces[..] };
        assert_eq!(bytes, pieces, "detokenize {:?}", text);
    }
}

#[test]
fn tokenize_specials_and_roundtrip() {
    let model = require!(stories());
    let with_bos = model.tokenize("Once upon a time", true, false).unwrap();
    let plain = model.tokenize("Once upon a time", false, false).unwrap();
    assert_eq!(with_bos[0], 1);
    assert_eq!(&with_bos[1..], &plain[..]);
    assert_eq!(model.detokenize(&plain, false).unwrap(), "Once upon a time");
    assert_eq!(model.tokenize("", false, false).unwrap(), Vec::<i32>::new());
    // A long text needs the buffer to grow.
    let long = "the cat sat on the mat. ".repeat(200);
    let ids = model.tokenize(&long, false, false).unwrap();
    assert!(ids.len() > 1000);
    assert_eq!(model.detokenize(&ids, false).unwrap(), long);
    // Out-of-range ids fail with a message.
    let err = model.detokenize(&[100000], false).unwrap_err();
    assert_eq!(err.status(), Status::OutOfRange, "{}", err);
}

#[test]
fn streaming_detokenizer_matches_whole() {
    let model = require!(stories());
    let text = "Ünïcödé: 日本語 and emoji 🦀!";
    let ids = model.tokenize(text, false, false).unwrap();
    let mut detok = model.detokenizer(false).unwrap();
    let mut out = String::new();
    for &t in &ids {
        out.push_str(&detok.push(t).unwrap());
    }
    out.push_str(&detok.flush().unwrap());
    // The streaming detokenizer keeps the leading space SentencePiece added (it continues a
    // text); whole-sequence detokenization drops it.
    assert_eq!(out, format!(" {}", text));
    assert_eq!(model.detokenize(&ids, false).unwrap(), text);
}

#[test]
fn vocab_only_tokenizes_but_cannot_generate() {
    let path = require!(stories_path());
    let model = Model::load_with(&path, &ModelOptions::new().vocab_only(true).use_mmap(false)).unwrap();
    assert_eq!(model.tokenize("Once", false, false).unwrap().len(), 1);
    let err = model.generate("Once", &kestrel::GenerateOptions::new().max_tokens(2)).unwrap_err();
    assert!(!err.message().is_empty(), "{}", err);
}

#[test]
fn missing_file_is_an_error() {
    let err = Model::load("/nonexistent/kestrel/model.gguf").unwrap_err();
    assert_eq!(err.status(), Status::Io, "{}", err);
    assert_eq!(err.name(), "ERR_IO");
    assert!(err.message().contains("/nonexistent/kestrel/model.gguf"), "{}", err.message());
    let shown = err.to_string();
    assert!(shown.contains("ERR_IO") && shown.contains("model.gguf"), "{}", shown);
    let boxed: Box<dyn std::error::Error> = Box::new(err);
    assert!(!boxed.to_string().is_empty());
}

#[test]
fn malformed_gguf_is_an_error() {
    // A GGUF header claiming a huge tensor count, then nothing.
    let mut bytes = b"GGUF".to_vec();
    bytes.extend_from_slice(&3u32.to_le_bytes());
    bytes.extend_from_slice(&u64::MAX.to_le_bytes());
    bytes.extend_from_slice(&0u64.to_le_bytes());
    let bad = temp_file("malformed.gguf", &bytes);
    let err = Model::load(&bad).unwrap_err();
    assert_eq!(err.status(), Status::Format, "{}", err);
    assert!(!err.message().is_empty());

    let not_gguf = temp_file("not.gguf", b"this is not a model file at all");
    let err = Model::load(&not_gguf).unwrap_err();
    assert_eq!(err.status(), Status::Format, "{}", err);

    let err = Model::load_with(&not_gguf, &ModelOptions::new().backend("no-such-backend")).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument, "{}", err);
    assert!(err.message().contains("no-such-backend"), "{}", err);

    let err = Model::load("nul\0inside.gguf").unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    let _ = fs::remove_dir_all(bad.parent().unwrap());
}

#[test]
fn embeddings_batched_equal_alone_and_are_unit_length() {
    let model = require!(stories());
    let mut ctx = kestrel::Context::new(&model, &kestrel::ContextOptions::new().n_threads(1)).unwrap();
    let a = model.tokenize("Once upon a time", true, false).unwrap();
    let b = model.tokenize("The cat sat.", true, false).unwrap();
    let both = ctx.embed(&[&a, &b], kestrel::sys::KESTREL_POOLING_MEAN, true).unwrap();
    assert_eq!(both.len(), 2);
    assert_eq!(both[0].len(), 64);
    let alone = ctx.embed(&[&b], kestrel::sys::KESTREL_POOLING_MEAN, true).unwrap();
    for (x, y) in alone[0].iter().zip(&both[1]) {
        assert!((x - y).abs() < 1e-5, "{} vs {}", x, y);
    }
    let len: f32 = both[0].iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((len - 1.0).abs() < 1e-5);
    let err = ctx.embed(&[&[]], kestrel::sys::KESTREL_POOLING_MEAN, true).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
}
