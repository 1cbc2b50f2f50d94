//! `Stream`: one engine request, its text pieces delivered through a channel from the engine's
//! worker thread.

use std::marker::PhantomData;
use std::os::raw::{c_char, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, Receiver, Sender};

use kestrel_sys as sys;

use crate::error::{check, Error, Result};
use crate::options::{c_string, GenerateOptions};

/// Why a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-generation token, a stop token or a stop string.
    Stop,
    /// `max_tokens`, or the context is full.
    Length,
    /// Cancelled (a dropped stream, or the engine freed).
    Cancelled,
    /// Failed; the stream yielded the error.
    Error,
    /// A value this crate does not know (or none).
    Other(i32),
}

impl FinishReason {
    fn from_code(code: i32) -> FinishReason {
        match code {
            sys::KESTREL_FINISH_STOP => FinishReason::Stop,
            sys::KESTREL_FINISH_LENGTH => FinishReason::Length,
            sys::KESTREL_FINISH_CANCELLED => FinishReason::Cancelled,
            sys::KESTREL_FINISH_ERROR => FinishReason::Error,
            other => FinishReason::Other(other),
        }
    }
}

/// What a finished request reports (`kestrel_request_result`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestResult {
    /// Why it ended.
    pub finish: FinishReason,
    /// The status code for `FinishReason::Error` (0 otherwise).
    pub status: i32,
    /// Prompt tokens.
    pub n_prompt: i32,
    /// Of those, found in the prefix cache.
    pub n_cached: i32,
    /// Tokens generated.
    pub n_generated: i32,
    /// Speculative decoding: tokens drafted.
    pub n_drafted: i32,
    /// Of those, kept.
    pub n_accepted: i32,
}

impl RequestResult {
    fn from_sys(r: &sys::kestrel_request_result) -> RequestResult {
        RequestResult {
            finish: FinishReason::from_code(r.finish),
            status: r.status,
            n_prompt: r.n_prompt,
            n_cached: r.n_cached,
            n_generated: r.n_generated,
            n_drafted: r.n_drafted,
            n_accepted: r.n_accepted,
        }
    }
}

/// What the worker thread sends to the stream.
enum Event {
    Piece(String),
    Done(RequestResult),
}

/// The callbacks' state: boxed at submit, freed by `on_done` (the last callback).
struct Sink {
    tx: Sender<Event>,
}

unsafe extern "C" fn on_token(_token: i32, piece: *const c_char, len: usize, user: *mut c_void) -> bool {
    let go_on = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: user is the Sink boxed in submit, alive until on_done; piece has len bytes.
        let sink = &*(user as *const Sink);
        if len == 0 {
            return true;
        }
        let bytes = std::slice::from_raw_parts(piece as *const u8, len);
        let text = String::from_utf8_lossy(bytes).into_owned();
        // A dropped receiver means the stream is gone: stop the request.
        sink.tx.send(Event::Piece(text)).is_ok()
    }));
    go_on.unwrap_or(false)
}

unsafe extern "C" fn on_done(result: *const sys::kestrel_request_result, user: *mut c_void) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the Sink was leaked by submit for exactly this call; result is valid here.
        let sink = Box::from_raw(user as *mut Sink);
        let result = if result.is_null() {
            RequestResult::from_sys(&sys::kestrel_request_result::default())
        } else {
            RequestResult::from_sys(&*result)
        };
        let _ = sink.tx.send(Event::Done(result));
    }));
}

/// A running request: an iterator over its text pieces (non-empty, complete UTF-8), ending
/// when the request finishes; a failure is yielded as the last item. Dropping it before the
/// end cancels the request.
pub struct Stream<'a> {
    engine: *mut sys::kestrel_engine,
    id: u64,
    rx: Receiver<Event>,
    result: Option<RequestResult>,
    _borrow: PhantomData<&'a ()>,
}

// SAFETY: the only engine call a Stream makes (kestrel_cancel) is thread-safe; the receiver is Send.
unsafe impl Send for Stream<'_> {}

impl<'a> Stream<'a> {
    /// Submits a request to `engine`; `reply` (may be null) is read during the call only.
    ///
    /// # Safety
    /// `engine` must stay valid for `'a`; `reply` null or valid.
    pub(crate) unsafe fn submit(
        engine: *mut sys::kestrel_engine,
        tokens: &[i32],
        options: &GenerateOptions,
        reply: *const sys::kestrel_reply_parser,
    ) -> Result<Stream<'a>> {
        if tokens.is_empty() {
            return Err(Error::invalid("the prompt has no tokens"));
        }
        let stop = options.stop_strings()?;
        let grammar = options.grammar.as_deref().map(c_string).transpose()?;
        let schema = options.json_schema.as_deref().map(c_string).transpose()?;
        let sampling = options.sampler_options();
        let (tx, rx) = channel();
        let sink = Box::into_raw(Box::new(Sink { tx }));

        let mut req = std::mem::MaybeUninit::<sys::kestrel_request>::uninit();
        sys::kestrel_request_init(req.as_mut_ptr());
        let mut req = req.assume_init();
        req.prompt = tokens.as_ptr();
        req.n_prompt = tokens.len() as i32;
        req.max_tokens = options.max_tokens;
        req.sampling = &sampling;
        req.stop_at_eog = options.stop_at_eog;
        req.stop_strings = stop.as_ptr();
        req.n_stop_strings = stop.len();
        req.grammar = grammar.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        req.json_schema = schema.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        req.reply = reply;
        req.on_token = Some(on_token);
        req.on_done = Some(on_done);
        req.user = sink as *mut c_void;

        let mut id = 0u64;
        let status = sys::kestrel_submit(engine, &req, &mut id);
        if let Err(e) = check(status) {
            // A failed submit runs no callback: the state is still ours.
            drop(Box::from_raw(sink));
            return Err(e);
        }
        Ok(Stream { engine, id, rx, result: None, _borrow: PhantomData })
    }

    /// The engine's id of the request.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// How the request ended, once the iterator has returned its last item.
    pub fn result(&self) -> Option<&RequestResult> {
        self.result.as_ref()
    }

    /// Cancels the request; the stream then ends (after pieces already sent).
    pub fn cancel(&self) {
        if self.result.is_none() {
            // SAFETY: the engine is valid for 'a. An unknown or finished id is not an error here.
            unsafe {
                sys::kestrel_cancel(self.engine, self.id);
            }
        }
    }

    /// All remaining text, or the first error.
    pub fn collect_text(self) -> Result<String> {
        let mut text = String::new();
        for piece in self {
            text.push_str(&piece?);
        }
        Ok(text)
    }
}

impl Iterator for Stream<'_> {
    type Item = Result<String>;

    fn next(&mut self) -> Option<Result<String>> {
        if self.result.is_some() {
            return None;
        }
        match self.rx.recv() {
            Ok(Event::Piece(text)) => Some(Ok(text)),
            Ok(Event::Done(result)) => {
                self.result = Some(result);
                if result.finish == FinishReason::Error {
                    let code = if result.status != 0 { result.status } else { sys::KESTREL_ERR_INTERNAL };
                    Some(Err(Error::new(code, "generation failed on the engine's worker thread")))
                } else {
                    None
                }
            }
            // on_done always sends before dropping the sender; treat a lost sender as the end.
            Err(_) => {
                self.result = Some(RequestResult::from_sys(&sys::kestrel_request_result::default()));
                None
            }
        }
    }
}

impl Drop for Stream<'_> {
    fn drop(&mut self) {
        self.cancel();
    }
}

impl std::fmt::Debug for Stream<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream").field("id", &self.id).field("result", &self.result).finish()
    }
}
