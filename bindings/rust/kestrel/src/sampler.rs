//! `Sampler`: the sampler chain of `kestrel_generate`, for your own decode loop.

use std::ptr::{self, NonNull};

use kestrel_sys as sys;

use crate::error::{check, Error, Result};
use crate::options::GenerateOptions;

/// A sampler chain with its own RNG state, configured by the sampling part of
/// [`GenerateOptions`]. Send but not Sync (one thread at a time).
pub struct Sampler {
    raw: NonNull<sys::kestrel_sampler>,
}

// SAFETY: kestrel.h: a kestrel_sampler "must be used by one thread at a time".
unsafe impl Send for Sampler {}

impl Sampler {
    /// A sampler with the temperature, top-k/p, min-p, penalties, seed and logit biases of
    /// `options` (the logit biases are copied).
    pub fn new(options: &GenerateOptions) -> Result<Sampler> {
        let o = options.sampler_options();
        let mut raw: *mut sys::kestrel_sampler = ptr::null_mut();
        check(unsafe { sys::kestrel_sampler_new(&o, &mut raw) })?;
        let raw = NonNull::new(raw).ok_or_else(|| Error::new(sys::KESTREL_ERR_INTERNAL, "kestrel_sampler_new gave NULL"))?;
        Ok(Sampler { raw })
    }

    /// The raw handle (owned by this Sampler).
    pub fn as_ptr(&self) -> *mut sys::kestrel_sampler {
        self.raw.as_ptr()
    }

    /// Picks a token from `logits` and records it for the penalties.
    pub fn sample(&mut self, logits: &[f32]) -> Result<i32> {
        if logits.len() > i32::MAX as usize {
            return Err(Error::invalid("sample: too many logits"));
        }
        let mut token = 0;
        check(unsafe { sys::kestrel_sampler_sample(self.as_ptr(), logits.as_ptr(), logits.len() as i32, &mut token) })?;
        Ok(token)
    }

    /// Records a token (e.g. of the prompt) for the penalties without sampling.
    pub fn accept(&mut self, token: i32) {
        unsafe { sys::kestrel_sampler_accept(self.as_ptr(), token) }
    }

    /// Forgets the recorded tokens.
    pub fn reset(&mut self) {
        unsafe { sys::kestrel_sampler_reset(self.as_ptr()) }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        // SAFETY: the handle came from kestrel_sampler_new.
        unsafe { sys::kestrel_sampler_free(self.raw.as_ptr()) }
    }
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler").field("raw", &self.raw).finish()
    }
}
