//! Errors: a `kestrel_status` with the message of `kestrel_last_error()`.

use std::ffi::CStr;
use std::fmt;

use kestrel_sys as sys;

/// The result type of every fallible call of this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// The kind of failure, one per `kestrel_status` error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// A NULL pointer, a bad option value, a malformed batch (or a Rust string with a NUL byte).
    InvalidArgument,
    /// A file could not be opened, read or mapped.
    Io,
    /// A file is malformed.
    Format,
    /// An architecture, tensor type or feature Kestrel does not have.
    Unsupported,
    /// Out of memory.
    OutOfMemory,
    /// A token id, position or index outside its range.
    OutOfRange,
    /// The KV cache has no room for the batch.
    ContextFull,
    /// A caller buffer was too small (handled inside this crate; rarely seen).
    BufferTooSmall,
    /// A callback asked to stop.
    Cancelled,
    /// A device or backend failure.
    Backend,
    /// A bug in Kestrel.
    Internal,
    /// A code this crate does not know (a newer library).
    Other(i32),
}

impl Status {
    /// The status for a raw `kestrel_status` code (`KESTREL_OK` maps to `Other(0)`).
    pub fn from_code(code: i32) -> Status {
        match code {
            sys::KESTREL_ERR_INVALID_ARGUMENT => Status::InvalidArgument,
            sys::KESTREL_ERR_IO => Status::Io,
            sys::KESTREL_ERR_FORMAT => Status::Format,
            sys::KESTREL_ERR_UNSUPPORTED => Status::Unsupported,
            sys::KESTREL_ERR_OUT_OF_MEMORY => Status::OutOfMemory,
            sys::KESTREL_ERR_OUT_OF_RANGE => Status::OutOfRange,
            sys::KESTREL_ERR_CONTEXT_FULL => Status::ContextFull,
            sys::KESTREL_ERR_BUFFER_TOO_SMALL => Status::BufferTooSmall,
            sys::KESTREL_ERR_CANCELLED => Status::Cancelled,
            sys::KESTREL_ERR_BACKEND => Status::Backend,
            sys::KESTREL_ERR_INTERNAL => Status::Internal,
            other => Status::Other(other),
        }
    }
}

/// A failed Kestrel call: the status code, its name and the library's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    code: i32,
    name: String,
    message: String,
}

impl Error {
    /// An error with `code` and an explicit message (not read from the library).
    pub fn new(code: i32, message: impl Into<String>) -> Error {
        Error { code, name: status_name(code), message: message.into() }
    }

    /// An error with `code` and the message of `kestrel_last_error()`; call it right after the
    /// failing call, on the same thread.
    pub(crate) fn last(code: i32) -> Error {
        // SAFETY: the string stays valid until the next call on this thread; it is copied at once.
        let message = unsafe {
            let p = sys::kestrel_last_error();
            if p.is_null() {
                String::new()
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        Error::new(code, message)
    }

    /// An `InvalidArgument` error made on the Rust side.
    pub(crate) fn invalid(message: impl Into<String>) -> Error {
        Error::new(sys::KESTREL_ERR_INVALID_ARGUMENT, message)
    }

    /// The raw `kestrel_status` code.
    pub fn code(&self) -> i32 {
        self.code
    }

    /// The status as an enum.
    pub fn status(&self) -> Status {
        Status::from_code(self.code)
    }

    /// The status name without prefix, e.g. `"ERR_FORMAT"`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The library's message naming the offending thing (may be empty).
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "kestrel: {}", self.name)
        } else {
            write!(f, "kestrel: {}: {}", self.name, self.message)
        }
    }
}

impl std::error::Error for Error {}

/// `kestrel_status_name(code)` as a String.
pub fn status_name(code: i32) -> String {
    // SAFETY: returns a static string, never NULL (checked anyway).
    unsafe {
        let p = sys::kestrel_status_name(code);
        if p.is_null() {
            format!("status {}", code)
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    }
}

/// `Ok(())` for `KESTREL_OK`, else the error with the thread's last message.
pub(crate) fn check(code: i32) -> Result<()> {
    if code == sys::KESTREL_OK {
        Ok(())
    } else {
        Err(Error::last(code))
    }
}
