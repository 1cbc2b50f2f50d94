//! The `(buf, cap, *len)` convention: call, and on `KESTREL_ERR_BUFFER_TOO_SMALL` grow the
//! buffer to `*len + 1` (text calls also write a NUL that `*len` does not count) and call again.

use std::os::raw::c_char;

use kestrel_sys as sys;

use crate::error::{check, Result};

/// Most retries when the needed size keeps growing between calls (engine stats).
const MAX_TRIES: usize = 8;

/// Fills a buffer of `T` through `call(buf, cap, len)`, starting with `initial` elements.
/// `call` must be idempotent (it is repeated when the buffer was too small).
pub(crate) fn read_vec<T: Copy + Default, F>(initial: usize, mut call: F) -> Result<Vec<T>>
where
    F: FnMut(*mut T, usize, &mut usize) -> sys::kestrel_status,
{
    let mut buf: Vec<T> = vec![T::default(); initial.max(1)];
    let mut tries = 0;
    loop {
        let mut len = 0usize;
        let status = call(buf.as_mut_ptr(), buf.len(), &mut len);
        tries += 1;
        if status == sys::KESTREL_ERR_BUFFER_TOO_SMALL && tries < MAX_TRIES {
            // Text calls report the length without the terminating NUL they also write.
            buf.resize((len + 1).max(buf.len() + 1), T::default());
            continue;
        }
        check(status)?;
        buf.truncate(len);
        return Ok(buf);
    }
}

/// Bytes through `call(buf, cap, len)`.
pub(crate) fn read_bytes<F>(initial: usize, mut call: F) -> Result<Vec<u8>>
where
    F: FnMut(*mut c_char, usize, &mut usize) -> sys::kestrel_status,
{
    read_vec::<u8, _>(initial, |buf, cap, len| call(buf as *mut c_char, cap, len))
}

/// Text through `call(buf, cap, len)` (invalid UTF-8 becomes U+FFFD).
pub(crate) fn read_string<F>(initial: usize, call: F) -> Result<String>
where
    F: FnMut(*mut c_char, usize, &mut usize) -> sys::kestrel_status,
{
    read_bytes(initial, call).map(into_string)
}

/// Bytes to a String, replacing invalid UTF-8 with U+FFFD (no copy when valid).
pub(crate) fn into_string(bytes: Vec<u8>) -> String {
    match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}
