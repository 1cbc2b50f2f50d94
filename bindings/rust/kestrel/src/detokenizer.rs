//! `Detokenizer`: token ids in, complete UTF-8 text out.

use std::marker::PhantomData;
use std::os::raw::c_char;
use std::ptr::{self, NonNull};

use kestrel_sys as sys;

use crate::buffer::{into_string, read_string};
use crate::error::{check, Error, Result};
use crate::model::Model;

/// A streaming detokenizer over a model's vocabulary. Send but not Sync.
pub struct Detokenizer<'m> {
    raw: NonNull<sys::kestrel_detokenizer>,
    buf: Vec<u8>,
    _model: PhantomData<&'m Model>,
}

// SAFETY: one thread at a time, like a context.
unsafe impl Send for Detokenizer<'_> {}

impl<'m> Detokenizer<'m> {
    /// A detokenizer over `model` (control tokens rendered if `render_special`).
    pub fn new(model: &'m Model, render_special: bool) -> Result<Detokenizer<'m>> {
        let mut raw: *mut sys::kestrel_detokenizer = ptr::null_mut();
        check(unsafe { sys::kestrel_detokenizer_new(model.as_ptr(), render_special, &mut raw) })?;
        let raw = NonNull::new(raw)
            .ok_or_else(|| Error::new(sys::KESTREL_ERR_INTERNAL, "kestrel_detokenizer_new gave NULL"))?;
        Ok(Detokenizer { raw, buf: vec![0; 1024], _model: PhantomData })
    }

    /// Pushes one token; returns the text that became complete (often empty mid-character).
    pub fn push(&mut self, token: i32) -> Result<String> {
        let mut len = 0usize;
        let status = unsafe {
            sys::kestrel_detokenizer_push(self.raw.as_ptr(), token, self.buf.as_mut_ptr() as *mut c_char, self.buf.len(), &mut len)
        };
        if status == sys::KESTREL_ERR_BUFFER_TOO_SMALL {
            // The token is consumed and its text stays pending; it cannot be fetched without
            // pushing again, so it comes first from the next push or flush, which get room.
            self.buf.resize(len.max(self.buf.len()) * 2, 0);
            return Ok(String::new());
        }
        check(status)?;
        Ok(into_string(self.buf[..len].to_vec()))
    }

    /// Emits what is left (an incomplete trailing sequence as U+FFFD) and resets.
    pub fn flush(&mut self) -> Result<String> {
        let raw = self.raw.as_ptr();
        read_string(self.buf.len(), |buf, cap, len| unsafe { sys::kestrel_detokenizer_flush(raw, buf, cap, len) })
    }
}

impl Drop for Detokenizer<'_> {
    fn drop(&mut self) {
        // SAFETY: the handle came from kestrel_detokenizer_new.
        unsafe { sys::kestrel_detokenizer_free(self.raw.as_ptr()) }
    }
}

impl std::fmt::Debug for Detokenizer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Detokenizer").field("raw", &self.raw).finish()
    }
}
