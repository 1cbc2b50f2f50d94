//! Raw FFI declarations of the Kestrel C API (`runtime/include/kestrel.h`), written by hand.
//!
//! The header's top comment is the contract: statuses plus `kestrel_last_error()` on the same
//! thread, options structs initialized by their `*_init()` and versioned by `struct_size`,
//! caller buffers as `(buf, cap, *len)`, and every handle released by its `*_free()`.
//! C enums are 4 bytes: they are `i32` type aliases with one constant per enumerator.
//! The `kestrel` crate wraps all of this in a safe API.
//!
//! The crate links `libkestrel` (see `build.rs`: `KESTREL_LIB_DIR`, else pkg-config, else
//! `-lkestrel`), shared, or static with the `static` feature. Its test `abi_layout` checks every
//! struct and enum against the C compiler's view printed by `kestrel_abi_layout`.
#![allow(non_camel_case_types)]

mod functions;
mod types;

pub use functions::*;
pub use types::*;
